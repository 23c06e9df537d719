// The Flow runs view: each run's state and, per step, its jobs waiting,
// queued, running, done and dead.

import { h, clear, panel, emptyRow, badge } from "./dom.js";
import { count, ago, time, duration } from "./format.js";
import { Refresher, loadList } from "./refresher.js";
import { STATE_TONES } from "./view-jobs.js";

const LIMIT = 50;
const STEP_COUNTS = ["waiting", "queued", "running", "done", "dead"];

function stepsSummary(steps) {
  return h("span", { class: "steps" }, steps.map((step) => {
    const tone = step.dead ? "red" : step.running || step.queued ? "blue" : step.waiting ? "neutral" : "green";
    return h("span", {
      class: `step-chip tone-${tone}`, testid: "flow-step",
      title: STEP_COUNTS.map((key) => `${key} ${step[key] || 0}`).join(", "),
    }, step.step, h("span", { class: "step-count" }, `${count(step.done)}${step.dead ? ` · ${count(step.dead)} dead` : ""}`));
  }));
}

function stepsTable(steps) {
  return h("table", { class: "table table-compact" },
    h("thead", {}, h("tr", {}, h("th", {}, "Step"), h("th", {}, "Engine"),
      STEP_COUNTS.map((key) => h("th", { class: "num" }, key[0].toUpperCase() + key.slice(1))))),
    h("tbody", {}, steps.map((step) => h("tr", {},
      h("td", {}, step.step), h("td", { class: "muted" }, step.engine),
      STEP_COUNTS.map((key) => h("td", { class: `num${step[key] ? "" : " zero"}` }, count(step[key] || 0)))))));
}

export class FlowsView {
  constructor(app) {
    this.title = "Flow runs";
    this.runs = null;
    this.open = new Set();
    this.sequence = 0;
    this.error = h("div", { class: "inline-error" });
    this.body = h("tbody", { testid: "flows-body" }, emptyRow(6, "Loading…"));
    this.element = h("div", { class: "view", testid: "view-flows" },
      panel({ title: "Flow runs", testid: "flows-panel", note: `the newest ${LIMIT}` },
        this.error,
        h("div", { class: "table-wrap" }, h("table", { class: "table", testid: "flows-table" },
          h("thead", {}, h("tr", {},
            h("th", {}, "Run"), h("th", {}, "Flow"), h("th", {}, "State"), h("th", {}, "Steps (jobs done)"),
            h("th", { class: "num" }, "Started"), h("th", { class: "num" }, "Took"))),
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

  load() {
    return loadList(this, "/api/flows", { limit: LIMIT }, "runs", "flows-error", 6);
  }

  toggle(run) {
    if (this.open.has(run)) this.open.delete(run);
    else this.open.add(run);
    this.render();
  }

  render() {
    clear(this.body);
    if (!this.runs.length) this.body.append(emptyRow(6, "No flow runs yet.", "flows-empty"));
    for (const run of this.runs) {
      const steps = run.steps || [];
      const open = this.open.has(run.run);
      const took = run.ended_at ? duration(run.ended_at - run.created_at) : "running";
      this.body.append(h("tr", { testid: "flow-row", dataset: { run: run.run, state: run.state } },
        h("td", { class: "mono" },
          h("button", {
            type: "button", class: "disclosure", "aria-expanded": String(open), testid: "flow-toggle",
            onclick: () => this.toggle(run.run),
          }, open ? "▾" : "▸"), " ", run.run),
        h("td", {}, run.flow),
        h("td", {}, badge(run.state, STATE_TONES[run.state], "flow-state"),
          run.reason ? h("div", { class: "muted small", title: run.reason }, run.reason) : null),
        h("td", {}, stepsSummary(steps)),
        h("td", { class: "num", title: time(run.created_at) }, ago(run.created_at)),
        h("td", { class: "num" }, took)));
      if (open) {
        this.body.append(h("tr", { class: "detail-row", testid: "flow-detail" },
          h("td", { colspan: 6 }, stepsTable(steps),
            (run.dead || []).length ? h("div", { class: "dead-jobs" },
              h("strong", {}, "Dead jobs: "),
              run.dead.map((dead) => h("div", { class: "small" }, `${dead.step || "—"} ${dead.key}: ${dead.reason || "no reason"}`))) : null)));
      }
    }
  }

  destroy() {
    this.refresher.destroy();
  }
}
