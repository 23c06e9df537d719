"""An app and its workers under one broker user, alice, whose rights are `alice.*=all`."""

from kittiwake.app import App

app = App(reply_prefix="alice.replies.",  # results: alice.replies.<app id>
          job_registry="alice.jobs")  # job records; the broker and alice's token: $KITTIWAKE_URL


@app.task(queue="alice.shop")
def square(x: int) -> int:
    return x * x


if __name__ == "__main__":
    print(square.submit(7).result(timeout=30))
    app.close()  # deletes its reply queue: admin on alice.* allows it
