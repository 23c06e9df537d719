"""Data pipelines on the broker: flows of steps, tokens and joins (after BalticLSC's multi-queue).

    from kittiwake.flow import Dataset, Flow, merge, optional

    flow = Flow("sales")

    @flow.step(inputs={"folder": flow.input("raw")}, split=True)
    def files(ctx, folder: Dataset):                       # python: run by `kittiwake worker MODULE:flow`
        for path in sorted(folder.local_path.glob("*.csv")):
            yield Dataset.csv(str(path))                   # one token per file, a sequence level pushed

    @flow.step(engine="spark", inputs={"part": files})     # run by `kittiwake spark-worker MODULE:flow`
    def clean(spark, part):
        return part.dropna()

    @flow.step(engine="spark", inputs={"parts": merge(clean)})
    def report(spark, parts):                              # the union of every part of one split
        return parts.groupBy("region").count()

    run = flow.run("kw://127.0.0.1:7370", inputs={"raw": Dataset.path("/data/in")}, data_dir="/data/runs")
    print(run.wait(timeout=600).state, run.outputs()["report.out"])

Data moves between steps as tokens (a `Dataset` reference and a sequence
stack); each step is a join of the broker, which starts a job once every
input holds a token with the same key (run id + sequence indices). Module
map: `pipeline` (Flow), `definition` (the DAG: steps, ports, merge,
optional), `dataset`, `names` (queues, joins, keys), `tokens` (token and job
formats, a job's outputs), `records` (run record and status), `runs` (start,
status, finish, cancel, retry, garbage collection; RunHandle), `context`
(StepContext), `jobs` (running one job, engine-neutral; ending runs),
`python_steps` (python steps on `kittiwake worker`), `spark_steps`
(DataFrames in and out), `spark_worker` (the Spark worker), `fusion` (a
Spark step's output kept in the worker's session for the next step there),
`reuse` and `fingerprints` (incremental re-runs: outputs of deterministic
steps reused by the fingerprint of their inputs), `loading` (MODULE:FLOW
references).
"""

from kittiwake.flow.context import StepContext, current_step
from kittiwake.flow.dataset import Dataset
from kittiwake.flow.definition import FlowDefinition, FlowInput, Input, Output, Step, merge, optional
from kittiwake.flow.pipeline import Flow
from kittiwake.flow.records import RunStatus, StepProgress
from kittiwake.flow.runs import RunHandle

__all__ = [
    "Dataset",
    "Flow",
    "FlowDefinition",
    "FlowInput",
    "Input",
    "Output",
    "RunHandle",
    "RunStatus",
    "Step",
    "StepContext",
    "StepProgress",
    "current_step",
    "merge",
    "optional",
]
