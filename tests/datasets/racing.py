"""Two loads of one dataset at once, as two ``sparsegcn`` commands started together run."""

from __future__ import annotations

import threading

from http_server import TIMEOUT


def load_twice_at_once(load, module, monkeypatch) -> list:
    """``[result or exception]`` of ``load()`` run in two threads that both reach
    ``module.download_file`` before either downloads: each has found the dataset
    missing, as two loads started together do (a trickling server then keeps both
    downloads in flight at once).
    """
    arrived = threading.Barrier(2, timeout=TIMEOUT)
    real = module.download_file

    def download_file(*args, **kwargs):
        arrived.wait()
        return real(*args, **kwargs)

    monkeypatch.setattr(module, "download_file", download_file)
    results: list = [None, None]

    def run(i: int) -> None:
        try:
            results[i] = load()
        except Exception as err:  # reported to the test, which names it
            results[i] = err

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=4 * TIMEOUT)
    assert not any(thread.is_alive() for thread in threads), "a load did not finish"
    return results
