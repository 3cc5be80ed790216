"""Storage tiers below and above the DRAM arena: disk spill files and device tensors."""
