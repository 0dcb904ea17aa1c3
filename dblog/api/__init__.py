"""The HTTP API of a running instance: dump control, status, Prometheus metrics, a status page.

It sits on the control contract (:class:`dblog.spi.Control`) only. :mod:`dblog.api.config` has
no web dependency (the configuration loads without the ``api`` extra); the server itself
(:mod:`dblog.api.server`) needs ``pip install 'dblog[api]'``.
"""
