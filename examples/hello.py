"""An App and its workers: `kittiwake worker hello:app` runs the tasks, `python hello.py` submits them."""

from kittiwake.app import App

app = App()  # the broker at $KITTIWAKE_URL, else kw://127.0.0.1:7370; it connects on first use


@app.task(queue="hello", max_attempts=3)
def square(x: int) -> int:
    return x * x


if __name__ == "__main__":
    print(square.submit(12).result(timeout=30))  # 144
    handles = app.map(square, range(10))  # one request for the ten tasks
    print(app.results(handles, timeout=30))  # [0, 1, 4, 9, 16, 25, 36, 49, 64, 81]
    app.close()
