"""The ZooKeeper adapter's server list spreading (dblog.ha.zk.spread_hosts)."""

from __future__ import annotations

from dblog.ha.zk import spread_hosts


def test_one_server_is_listed_three_times() -> None:
    assert spread_hosts("127.0.0.1:2181") == "127.0.0.1:2181,127.0.0.1:2181,127.0.0.1:2181"


def test_two_servers_keep_their_chroot_at_the_end() -> None:
    assert spread_hosts("a:1,b:2/dblog/x") == "a:1,b:2,a:1,b:2/dblog/x"


def test_three_or_more_servers_are_left_alone() -> None:
    assert spread_hosts("a:1,b:1,c:1") == "a:1,b:1,c:1"
    assert spread_hosts("a,b,c,d") == "a,b,c,d"
