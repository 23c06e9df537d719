// The Workers view: the worker registry's records (alive while a worker
// renews its record's lease, lost once it stops renewing).

import { h, clear, panel, emptyRow, badge } from "./dom.js";
import { count, ago, time, percent } from "./format.js";
import { meterBar } from "./overview.js";
import { Refresher, loadList } from "./refresher.js";
import { routeHash } from "./routes.js";

const DEFAULT_REGISTRY = "_workers";
const COLUMNS = 11;

export function workerState(worker) {
  if (!worker.alive) return ["lost", "red"];
  if (worker.stopping) return ["stopping", "amber"];
  return ["alive", "green"];
}

export class WorkersView {
  constructor(app, route) {
    this.app = app;
    this.title = "Workers";
    this.registry = route.params.registry || DEFAULT_REGISTRY;
    this.workers = null;
    this.sequence = 0;
    this.registryInput = h("input", {
      class: "input", value: this.registry, testid: "workers-registry", "aria-label": "Registry queue",
      title: "The registry queue the workers use (--registry-queue)",
    });
    this.registryInput.addEventListener("change", () => {
      const registry = this.registryInput.value.trim();
      this.app.navigate(routeHash("workers", null, { registry: registry === DEFAULT_REGISTRY ? "" : registry }));
    });
    this.error = h("div", { class: "inline-error" });
    this.body = h("tbody", { testid: "workers-body" }, emptyRow(COLUMNS, "Loading…"));
    this.summary = h("span", { class: "panel-note", testid: "workers-summary" });
    this.element = h("div", { class: "view", testid: "view-workers" },
      panel({
        title: "Workers", testid: "workers-panel",
        tools: [this.summary, h("label", { class: "inline-label" }, "Registry", this.registryInput)],
      },
      this.error,
      h("div", { class: "table-wrap" }, h("table", { class: "table", testid: "workers-table" },
        h("thead", {}, h("tr", {},
          h("th", {}, "Worker"), h("th", {}, "State"), h("th", {}, "Host"), h("th", { class: "num" }, "PID"),
          h("th", {}, "Queues"), h("th", { class: "num" }, "Slots"), h("th", { class: "num" }, "Running"),
          h("th", {}, "Utilisation"), h("th", { class: "num" }, "Finished"), h("th", { class: "num" }, "Last heartbeat"),
          h("th", { class: "num" }, "Started"))),
        this.body))));
    this.refresher = new Refresher(app, () => this.load());
    this.refresher.now();
  }

  streamQuery() {
    return { view: "overview" };
  }

  update(route) {
    const registry = route.params.registry || DEFAULT_REGISTRY;
    if (registry === this.registry) return;
    this.registry = registry;
    this.registryInput.value = registry;
    this.load();
  }

  refresh() {
    this.load();
  }

  tick() {
    if (this.workers) this.render();
  }

  load() {
    return loadList(this, "/api/workers", { registry: this.registry === DEFAULT_REGISTRY ? "" : this.registry }, "workers", "workers-error", COLUMNS);
  }

  render() {
    const workers = this.workers;
    const alive = workers.filter((worker) => worker.alive).length;
    this.summary.textContent = `${count(alive)} alive, ${count(workers.length - alive)} lost`;
    clear(this.body);
    if (!workers.length) this.body.append(emptyRow(COLUMNS, "No worker has registered here.", "workers-empty"));
    for (const worker of workers) {
      const [state, tone] = workerState(worker);
      const running = worker.running || [];
      const queues = worker.queues || [];
      this.body.append(h("tr", { testid: "worker-row", dataset: { worker: worker.id, state } },
        h("td", { class: "mono", title: worker.id }, worker.id),
        h("td", {}, badge(state, tone, "worker-state")),
        h("td", {}, worker.host || "—"),
        h("td", { class: "num" }, worker.pid ?? "—"),
        h("td", { class: "queues", title: queues.join(", ") }, queues.join(", ") || "—"),
        h("td", { class: "num" }, count(worker.concurrency)),
        h("td", { class: "num", title: running.join("\n") }, count(running.length)),
        h("td", { class: "utilisation" },
          worker.utilisation === null || worker.utilisation === undefined ? "—"
            : h("span", { class: "meter-cell" }, meterBar(worker.utilisation), h("span", { class: "num" }, percent(worker.utilisation)))),
        h("td", { class: "num" }, count(worker.finished)),
        h("td", { class: "num", title: time(worker.last_beat_at) }, ago(worker.last_beat_at)),
        h("td", { class: "num", title: time(worker.started_at) }, ago(worker.started_at))));
    }
  }

  destroy() {
    this.refresher.destroy();
  }
}
