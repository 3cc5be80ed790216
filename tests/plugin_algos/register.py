"""The entry point's module: registering is all it does."""

from kilorl.algos.registry import AlgorithmSpec, register

register(AlgorithmSpec(name="counting_pg", config="tests.plugin_algos.counting_pg:CountingPGConfig",
                       learner="tests.plugin_algos.counting_pg:CountingPGLearner",
                       policy="tests.plugin_algos.counting_pg:CountingPolicy"))
register(AlgorithmSpec(name="tiny_q", config="tests.plugin_algos.tiny_q:TinyQConfig",
                       learner="tests.plugin_algos.tiny_q:TinyQLearner", policy="tests.plugin_algos.tiny_q:Greedy",
                       model="kilorl.algos.dqn.model:build_q_network", data_path="replay"))
