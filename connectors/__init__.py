"""Suanli connectors: the adapter kit (:mod:`.kit`) and the built-in adapters.

- :mod:`.kit`: the Discovery / Monitoring / Dispatching interfaces, :class:`~.kit.Adapter`
  and :class:`~.kit.ConnectorRunner`, which does all Kafka I/O for any adapter.
- :mod:`.simulated`: 'sim', a simulated heterogeneous cluster from an openb node list.
- :mod:`.local_process`: 'local', real OS processes on this machine.
- :mod:`.launch`: ``build_adapter``, ``run_connector`` and the ``python -m suanli.connectors`` CLI.
"""
