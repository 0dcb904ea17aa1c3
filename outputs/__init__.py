"""Outputs shipped with dblog (installed as ``dblog.outputs``)."""
