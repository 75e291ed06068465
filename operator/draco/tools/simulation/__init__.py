"""The parts of ``draco simulate`` (`draco.tools.simulate`, the command): reading the input
(:mod:`.inputs`), what is allocated together (:mod:`.units`), the cluster the rules read
(:mod:`.cluster`) and the decision for each unit (:mod:`.placement`)."""
