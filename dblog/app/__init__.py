"""What users run: the embedded :class:`~dblog.app.pipeline.Pipeline`, the YAML configuration,
plug-in loading by name, and the ``dblog`` command line."""
