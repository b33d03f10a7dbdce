"""The service's queue bound (issue 24): with a FAKE search that holds its turn, the searches
beyond MAX_WAITING get 503 with Retry-After at once, a waiting one gets 503 after MAX_WAIT_S, and
those admitted are answered once the turn is free.  The real service over HTTP is tested in
test_pipeline_e2e (hosts, origins, bodies)."""

import threading
import time

from fastapi.testclient import TestClient


def test_searches_beyond_the_queue_are_turned_away_and_the_rest_answered(monkeypatch, tmp_path):
    import situate.pipelines.operations as ops
    import situate.service as svc

    release = threading.Event()
    entered = []

    def fake_search(query, k, home, rerank):  # FAKE: holds the one turn until released
        entered.append(query)
        release.wait(20)
        return [], []

    monkeypatch.setattr(ops, "search", fake_search)
    monkeypatch.setattr(svc, "MAX_WAITING", 3)
    client = TestClient(svc.create_app(home=str(tmp_path), hosts=["testserver"]))
    codes: dict[int, int] = {}

    def get(i):
        codes[i] = client.get("/search", params={"q": f"q{i}"}).status_code

    first = threading.Thread(target=get, args=(0,))
    first.start()
    while not entered:
        time.sleep(0.01)
    waiting = [threading.Thread(target=get, args=(i,)) for i in (1, 2, 3)]
    for t in waiting:
        t.start()
    time.sleep(0.5)  # the three are waiting for the turn
    r = client.get("/search", params={"q": "one too many"})
    assert r.status_code == 503 and r.headers["retry-after"] == "1" and "3 searches are waiting" in r.json()["detail"]
    release.set()
    for t in [first, *waiting]:
        t.join(30)
    assert codes == {0: 200, 1: 200, 2: 200, 3: 200} and len(entered) == 4


def test_a_search_that_waits_past_the_bound_gets_503(monkeypatch, tmp_path):
    import situate.pipelines.operations as ops
    import situate.service as svc

    release = threading.Event()

    def fake_search(query, k, home, rerank):  # FAKE: holds the one turn until released
        release.wait(20)
        return [], []

    monkeypatch.setattr(ops, "search", fake_search)
    monkeypatch.setattr(svc, "MAX_WAIT_S", 0.3)
    client = TestClient(svc.create_app(home=str(tmp_path), hosts=["testserver"]))
    holder = threading.Thread(target=lambda: client.get("/search", params={"q": "held"}))
    holder.start()
    time.sleep(0.3)
    r = client.get("/search", params={"q": "late"})
    release.set()
    holder.join(30)
    assert r.status_code == 503 and r.json()["detail"] == "busy: no turn within 0.3 s; try again shortly"


def test_other_hosts_are_refused_unless_listed(tmp_path):
    import situate.service as svc

    assert svc.allowed_hosts(None, []) == ["localhost", "127.0.0.1", "[::1]"]
    assert svc.allowed_hosts("token", []) == ["*"]
    assert svc.allowed_hosts("token", ["search.internal"])[-1] == "search.internal"
    client = TestClient(svc.create_app(home=str(tmp_path)))  # TestClient's Host is "testserver"
    assert client.get("/health").status_code == 400
    client = TestClient(svc.create_app(home=str(tmp_path / "absent"), hosts=["testserver"]))
    h = client.get("/health").json()
    assert h == {"status": "no data folder", "home": "absent"}  # its name, not its path
