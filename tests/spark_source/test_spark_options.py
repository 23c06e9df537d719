"""The options of the `kittiwake` Spark format: what each use takes, and the clear errors for the
rest (`kittiwake.spark.options`, no Spark needed); the same errors through Spark are in
test_spark_batch.py."""

from __future__ import annotations

import pytest

from kittiwake.errors import BadRequest
from kittiwake.spark.options import read_options, stream_options, url_of, write_options

URL = "kw://127.0.0.1:7370"


def test_a_read_names_one_queue_or_a_pattern() -> None:
    options = read_options({"url": URL, "queue": "jobs", "partitions": "4", "page_size": "500"})
    assert (options.queue, options.pattern, options.partitions, options.page_size) == ("jobs", None, 4, 500)
    assert read_options({"url": URL, "pattern": "^crawl#"}).partitions is None


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"queue": "jobs"}, "option 'url' is required"),
        ({"url": "  ", "queue": "jobs"}, "option 'url' is required"),
        ({"url": "http://x", "queue": "jobs"}, "scheme 'http'"),
        ({"url": URL}, "needs option 'queue' (one queue) or 'pattern'"),
        ({"url": URL, "queue": "jobs", "pattern": "j"}, "'queue' and 'pattern' exclude each other"),
        ({"url": URL, "queue": "jobs", "partitions": "many"}, "option 'partitions' must be a whole number, got 'many'"),
        ({"url": URL, "queue": "jobs", "partitions": "0"}, "option 'partitions' must be between 1 and"),
        ({"url": URL, "queue": "jobs", "page_size": "20000"}, "option 'page_size' must be between 1 and 10000"),
        ({"url": URL, "queue": "jobs", "timeout": "-1"}, "option 'timeout' must be a positive number of seconds"),
        ({"url": URL, "queue": "bad queue"}, "queue"),
        ({"url": URL, "queue": "jobs", "lease_secs": "5"}, "a batch read does not take option 'lease_secs'"),
    ],
)
def test_a_bad_read_option_is_named(options: dict[str, str], message: str) -> None:
    with pytest.raises(BadRequest) as raised:
        read_options(options)
    assert message in raised.value.message


def test_a_write_takes_a_default_queue_and_a_batch_size() -> None:
    options = write_options({"url": URL, "queue": "out", "batch_size": "50"})
    assert (options.queue, options.batch_size) == ("out", 50)
    with pytest.raises(BadRequest, match="does not take option 'pattern'"):
        write_options({"url": URL, "pattern": "x"})
    with pytest.raises(BadRequest, match="'batch_size' must be a whole number"):
        write_options({"url": URL, "batch_size": "1.5"})


def test_a_stream_needs_a_queue_and_a_name_that_make_its_log() -> None:
    options = stream_options({"url": URL, "queue": "grp#jobs", "name": "to-parquet", "lease_secs": "90"})
    assert options.log_queue == "grp#jobs.stream.to-parquet"
    assert (options.lease_secs, options.max_tasks_per_batch, options.partitions) == (90.0, 1000, 1)
    for bad, message in [
        ({"url": URL, "name": "s"}, "a stream needs option 'queue'"),
        ({"url": URL, "pattern": "j", "name": "s"}, "a stream consumes one queue"),
        ({"url": URL, "queue": "jobs"}, "a stream needs option 'name'"),
        ({"url": URL, "queue": "jobs", "name": "a#b"}, "option 'name' 'a#b' may hold only"),
        ({"url": URL, "queue": "jobs", "name": "s", "lease_secs": "0.5"}, "'lease_secs' must be between 1 and"),
        ({"url": URL, "queue": "jobs", "name": "s", "max_tasks_per_batch": "6000"}, "between 1 and 5000"),
        ({"url": URL, "queue": "q" * 240, "name": "s" * 10}, "choose a shorter 'name'"),
    ]:
        with pytest.raises(BadRequest) as raised:
            stream_options(bad)
        assert message in raised.value.message, bad


def test_the_url_never_shows_its_token_in_an_error() -> None:
    with pytest.raises(BadRequest) as raised:
        url_of({"url": "kw://alice:s3cret@host:notaport"})
    assert "s3cret" not in str(raised.value)
