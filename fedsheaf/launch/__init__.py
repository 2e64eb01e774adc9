"""Job drivers: ``fedsheaf run`` on every rank (``job``), then the run of one family:
decentralized (``decentralized``), hub-based FedProto/FedMuscle (``hub``) and
server-based (``server``). They join the core (``runtime``, ``algorithms``) to the run
directory (``rundir``)."""
