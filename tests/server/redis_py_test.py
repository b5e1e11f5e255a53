"""redis-py (Debian's python3-redis) against a running `pmrt serve`: its own API for every
command the server has, pipelines with and without transactions (good and bad commands mixed),
WATCH optimistic locking with a retry loop under contention from two processes, AUTH with a
password set at runtime, and the errors redis-py turns into exceptions.

Usage: redis_py_test.py PORT. Exit 77 (skipped) when redis-py is not installed.
"""

import multiprocessing
import sys
import time

try:
    import redis
except ImportError:
    print("SKIP: redis-py is not installed (apt-get install python3-redis)")
    sys.exit(77)

PORT = int(sys.argv[1])


def client(**kw):
    return redis.Redis(port=PORT, decode_responses=True, **kw)


def expect_error(text, fn, *args, **kw):
    """fn(*args) raises a redis error whose message contains `text`."""
    try:
        fn(*args, **kw)
    except redis.exceptions.RedisError as e:
        assert text in str(e), f"{fn.__name__}{args}: error {e!r}, want {text!r}"
        return
    raise AssertionError(f"{fn.__name__}{args}: no error, want {text!r}")


def strings(r):
    assert r.ping() is True
    assert r.echo("a b") == "a b"
    assert r.set("k", "v") is True
    assert r.get("k") == "v"
    assert r.get("missing") is None
    assert r.set("k", "w", nx=True) is None
    assert r.set("k", "w", xx=True, get=True) == "v"
    assert r.setnx("k", "x") is False
    assert r.getset("k", "y") == "w"
    assert r.getdel("k") == "y"
    assert r.incr("n") == 1
    assert r.incrby("n", 10) == 11
    assert r.decr("n") == 10
    assert r.decrby("n", 4) == 6
    assert r.incrbyfloat("f", 1.5) == 1.5
    assert r.append("s", "Hello") == 5
    assert r.append("s", " World") == 11
    assert r.strlen("s") == 11
    assert r.getrange("s", -5, -1) == "World"
    assert r.setrange("s", 6, "Redis") == 11
    assert r.substr("s", 0, 4) == "Hello"
    assert r.mset({"a": "1", "b": "2"}) is True
    assert r.mget("a", "missing", "b") == ["1", None, "2"]
    assert r.exists("a", "b", "missing", "a") == 3
    assert r.delete("a", "missing") == 1
    assert r.unlink("b") == 1
    expect_error("not an integer", r.incr, "s")


def expiry(r):
    r.flushdb()
    assert r.set("e", "v", ex=100) is True
    assert 99 <= r.ttl("e") <= 100
    assert 99000 <= r.pttl("e") <= 100000
    assert r.expire("e", 50, gt=True) is False
    assert r.expire("e", 50, lt=True) is True
    assert r.persist("e") is True and r.ttl("e") == -1
    assert r.ttl("missing") == -2
    assert r.setex("s", 100, "v") is True and r.psetex("p", 100000, "v") is True
    assert r.getex("s", persist=True) == "v" and r.ttl("s") == -1
    assert r.pexpireat("s", 4102444800000) is True
    assert r.expiretime("s") == 4102444800 and r.pexpiretime("s") == 4102444800000
    assert r.incr("counter") == 1 and r.expire("counter", 100) is True
    assert r.incr("counter") == 2 and r.ttl("counter") > 0  # INCR keeps the deadline
    assert r.set("counter", 5) is True and r.ttl("counter") == -1  # SET clears it
    assert r.set("gone", "v", px=50) is True
    time.sleep(0.2)
    assert r.get("gone") is None and r.exists("gone") == 0
    assert "gone" not in r.keys()
    expect_error("invalid expire time in 'setex' command", r.setex, "x", 0, "v")
    expect_error("not an integer", r.expire, "e", "soon")
    assert r.touch("e", "missing") == 1


def hashes(r):
    r.flushdb()
    assert r.hset("h", mapping={"a": "1", "b": "2"}) == 2
    assert r.hset("h", "c", "3") == 1
    assert r.hget("h", "a") == "1" and r.hget("h", "zz") is None
    assert r.hmget("h", ["a", "zz", "c"]) == ["1", None, "3"]
    assert r.hgetall("h") == {"a": "1", "b": "2", "c": "3"}
    assert r.hkeys("h") == ["a", "b", "c"] and r.hvals("h") == ["1", "2", "3"]
    assert r.hlen("h") == 3 and r.hexists("h", "b") and not r.hexists("h", "zz")
    assert r.hstrlen("h", "a") == 1
    assert r.hsetnx("h", "a", "9") == 0 and r.hsetnx("h", "d", "4") == 1
    assert r.hincrby("h", "a", 10) == 11
    assert r.hincrbyfloat("h", "f", 1.5) == 1.5
    assert r.hdel("h", "a", "zz") == 1
    assert r.hmset("m", {"x": "1"}) is True
    assert dict(r.hscan_iter("h")) == {"b": "2", "c": "3", "d": "4", "f": "1.5"}
    assert r.hrandfield("h") in {"b", "c", "d", "f"}
    assert len(r.hrandfield("h", 2, withvalues=True)) == 4
    assert r.type("h") == "hash" and r.exists("h") == 1
    assert sorted(r.keys()) == ["h", "m"]
    assert r.expire("h", 100) is True and 99 <= r.ttl("h") <= 100
    assert r.rename("h", "h2") is True and r.hget("h2", "b") == "2"
    r.set("s", "v")
    expect_error("WRONGTYPE", r.hget, "s", "a")
    expect_error("WRONGTYPE", r.get, "h2")
    expect_error("hash value is not an integer", r.hincrby, "h2", "f", 1)
    with r.pipeline() as p:  # MULTI/EXEC
        p.hset("t", "a", "1").hincrby("t", "a", 2).hgetall("t")
        assert p.execute() == [1, 3, {"a": "3"}]
    assert r.delete("h2", "m", "t") == 3


def keyspace(r):
    r.flushdb()
    r.mset({"user:1": "a", "user:2": "b", "user:10": "c", "item:1": "d"})
    assert r.dbsize() == 4
    assert r.keys("user:?") == ["user:1", "user:2"]
    assert sorted(r.keys()) == ["item:1", "user:1", "user:10", "user:2"]
    assert sorted(r.scan_iter(match="user:*", count=2)) == ["user:1", "user:10", "user:2"]
    assert r.type("user:1") == "string"
    assert r.type("nope") == "none"
    assert r.randomkey() in {"item:1", "user:1", "user:10", "user:2"}
    assert r.rename("user:1", "user:one") is True
    assert r.get("user:one") == "a" and r.get("user:1") is None
    assert r.renamenx("user:one", "user:2") is False
    assert r.renamenx("user:one", "user:3") is True
    assert r.copy("user:3", "user:4") is True
    assert r.copy("user:3", "user:2") is False
    assert r.copy("user:3", "user:2", replace=True) is True
    assert r.mget("user:2", "user:3", "user:4") == ["a", "a", "a"]
    expect_error("no such key", r.rename, "missing", "x")
    expect_error("DB index is out of range", r.copy, "user:3", "x", destination_db=1)
    assert r.execute_command("PMRT.SYNC") == "OK"
    assert r.flushall() is True
    assert r.randomkey() is None


def connection(r):
    cid = r.client_id()
    assert isinstance(cid, int) and cid > 0
    assert r.client_setname("py-test") is True
    assert r.client_getname() == "py-test"
    mine = r.client_info()
    assert int(mine["id"]) == cid and mine["name"] == "py-test", mine
    listed = r.client_list()
    assert any(c["id"] == str(cid) for c in listed), listed
    assert r.client_list(client_id=[str(cid)])[0]["name"] == "py-test"
    secs, micros = r.time()
    assert secs > 1700000000 and 0 <= micros < 1000000
    info = r.info()
    assert info["redis_version"] == "6.2.0", info["redis_version"]
    assert info["role"] == "master"
    assert "pmrt_version" in info and "epoch_completed" in info
    persistence = r.info("persistence")
    assert persistence["aof_enabled"] == 0 and "pmrt_last_open_clean" in persistence
    config = r.config_get("*")
    assert config["appendonly"] == "no" and config["databases"] == "1", config
    assert r.config_set("timeout", 0) is True
    expect_error("can't set immutable config", r.config_set, "port", 1)
    assert r.execute_command("SELECT", 0) is True
    hello = r.execute_command("HELLO", "2")
    assert hello[hello.index("proto") + 1] == 2, hello
    assert r.command_count() > 30
    expect_error("unknown command", r.execute_command, "NOSUCH")
    expect_error("wrong number of arguments for 'get' command", r.execute_command, "GET")
    assert r.ping() is True  # the connection is still usable after every error


def pipelines(r):
    p = r.pipeline(transaction=False)
    p.set("p:a", "1").incr("p:a").rename("p:a", "p:b").get("p:b").exists("p:a", "p:b")
    p.copy("p:b", "p:c").keys("p:*")
    assert p.execute() == [True, 2, True, "2", 1, True, ["p:b", "p:c"]]
    # A bad command in the middle: its error in its place, the others run.
    p = r.pipeline(transaction=False)
    p.set("p:d", "x").rename("p:missing", "p:e").incr("p:d").get("p:d")
    results = p.execute(raise_on_error=False)
    assert results[0] is True and results[3] == "x", results
    assert isinstance(results[1], redis.exceptions.ResponseError) and "no such key" in str(
        results[1]
    )
    assert isinstance(results[2], redis.exceptions.ResponseError), results
    assert r.exists("p:e") == 0


def transactions(r):
    # redis-py's default pipeline: MULTI ... EXEC.
    p = r.pipeline()
    p.set("t:a", "1").incr("t:a").mset({"t:b": "x", "t:c": "y"}).get("t:b").delete("t:c")
    assert p.execute() == [True, 2, True, "x", 1]
    # A command that fails when it runs fails alone; the rest are applied.
    p = r.pipeline()
    p.set("t:d", "word").incr("t:d").set("t:e", "1")
    results = p.execute(raise_on_error=False)
    assert results[0] is True and results[2] is True, results
    assert isinstance(results[1], redis.exceptions.ResponseError), results
    assert r.get("t:e") == "1"
    # A watched key written by another client: WatchError, nothing applied.
    with r.pipeline() as p:
        p.watch("t:a")
        client().set("t:a", "changed")
        p.multi()
        p.set("t:a", "mine")
        try:
            p.execute()
            raise AssertionError("EXEC ran although its watched key changed")
        except redis.exceptions.WatchError:
            pass
    assert r.get("t:a") == "changed"
    assert r.msetnx({"t:f": "1", "t:g": "2"}) is True
    assert r.msetnx({"t:g": "3", "t:h": "4"}) is False
    assert r.mget("t:f", "t:g", "t:h") == ["1", "2", None]


def increment_with_watch(n):
    """Adds 1 to w:counter n times, each a WATCH / GET / MULTI / SET / EXEC retried on conflict;
    returns the number of retries."""
    r = client()
    retries = 0
    for _ in range(n):
        while True:
            try:
                with r.pipeline() as p:
                    p.watch("w:counter")
                    value = int(p.get("w:counter") or 0)
                    p.multi()
                    p.set("w:counter", value + 1)
                    p.execute()
                    break
            except redis.exceptions.WatchError:
                retries += 1
    return retries


def watch_contention(r):
    r.delete("w:counter")
    n = 300
    with multiprocessing.Pool(2) as pool:
        retries = pool.map(increment_with_watch, [n, n])
    # Every increment applied exactly once: no lost update, whatever the interleaving.
    assert r.get("w:counter") == str(2 * n), (r.get("w:counter"), retries)
    print(f"WATCH under contention: {2 * n} increments, {sum(retries)} retries")


def auth(r):
    assert r.config_set("requirepass", "pw-1") is True
    try:
        expect_error("Authentication required", client().ping)
        expect_error("invalid username-password pair", client(password="wrong").ping)
        ok = client(password="pw-1", client_name="authed")
        assert ok.ping() is True
        assert ok.client_getname() == "authed"
        assert client(username="default", password="pw-1").set("auth:k", "v") is True
        assert r.get("auth:k") == "v"  # this connection authenticated before the password
    finally:
        assert r.config_set("requirepass", "") is True
    assert client().ping() is True


def resp3():
    # RESP3 in redis-py came with 5.0 (Redis(protocol=3)); Debian 12's 4.3.4 has no such
    # option: then the HELLO 3 replies are covered by the in-process tests only.
    try:
        r3 = client(protocol=3)
    except TypeError:
        print(f"redis-py {redis.__version__} has no protocol=3: RESP3 not tried here")
        return
    assert r3.get("missing") is None
    assert r3.config_get("appendonly") == {"appendonly": "no"}


def main():
    r = client()
    r.flushall()
    strings(r)
    expiry(r)
    hashes(r)
    keyspace(r)
    connection(r)
    pipelines(r)
    transactions(r)
    watch_contention(r)
    auth(r)
    resp3()
    r.flushall()
    print(f"PASS: redis-py {redis.__version__}")


if __name__ == "__main__":
    main()
