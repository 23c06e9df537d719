// The Jobs view: DAG jobs submitted through App, newest first, each with its
// state (derived by the broker from where the job's sink tasks are).

import { h, clear, panel, emptyRow, badge } from "./dom.js";
import { count, ago, time } from "./format.js";
import { Refresher, loadList } from "./refresher.js";

const LIMIT = 100;
// hidden: the record names queues the viewer may not read; unknown: not looked at in full
export const STATE_TONES = {
  waiting: "neutral", running: "blue", done: "green", failed: "red", cancelled: "amber", hidden: "neutral", unknown: "amber",
};
const SINK_PARTS = ["done", "running", "queued", "waiting", "failed", "hidden"];

function progress(sinks) {
  const total = SINK_PARTS.reduce((sum, key) => sum + (sinks[key] || 0), 0);
  const bar = h("span", { class: "progress" });
  for (const key of SINK_PARTS) {
    if (!sinks[key]) continue;
    const part = h("span", { class: `progress-part part-${key}`, title: `${sinks[key]} ${key}` });
    part.style.width = `${(sinks[key] / total) * 100}%`;
    bar.append(part);
  }
  const text = SINK_PARTS.filter((key) => sinks[key]).map((key) => `${count(sinks[key])} ${key}`).join(" · ");
  return h("span", { class: "progress-cell" }, bar, h("span", { class: "progress-text" }, text || "—"));
}

export class JobsView {
  constructor(app) {
    this.title = "Jobs";
    this.jobs = null;
    this.sequence = 0;
    this.error = h("div", { class: "inline-error" });
    this.body = h("tbody", { testid: "jobs-body" }, emptyRow(6, "Loading…"));
    this.element = h("div", { class: "view", testid: "view-jobs" },
      panel({ title: "Jobs", testid: "jobs-panel", note: `the newest ${LIMIT}` },
        this.error,
        h("div", { class: "table-wrap" }, h("table", { class: "table", testid: "jobs-table" },
          h("thead", {}, h("tr", {},
            h("th", {}, "Job"), h("th", {}, "Name"), h("th", {}, "State"), h("th", { class: "num" }, "Tasks"),
            h("th", {}, "Sink tasks"), h("th", { class: "num" }, "Submitted"))),
          this.body))));
    this.refresher = new Refresher(app, () => this.load());
    this.refresher.now();
  }

  streamQuery() {
    return { view: "overview" };
  }

  refresh() {
    this.load();
  }

  tick() {
    if (this.jobs) this.render();
  }

  load() {
    return loadList(this, "/api/jobs", { limit: LIMIT }, "jobs", "jobs-error", 6);
  }

  render() {
    clear(this.body);
    if (!this.jobs.length) this.body.append(emptyRow(6, "No jobs yet: App's Job.submit records them here.", "jobs-empty"));
    for (const job of this.jobs) {
      this.body.append(h("tr", { testid: "job-row", dataset: { job: job.id, state: job.state } },
        h("td", { class: "mono", title: job.id }, job.id),
        h("td", {}, job.name || "—"),
        h("td", {}, badge(job.state, STATE_TONES[job.state], "job-state")),
        h("td", { class: "num" }, count(job.nodes)),
        h("td", {}, progress(job.sinks || {})),
        h("td", { class: "num", title: time(job.created_at) }, ago(job.created_at))));
    }
  }

  destroy() {
    this.refresher.destroy();
  }
}
