"""Source connectors shipped with dblog (installed as ``dblog.connectors``)."""
