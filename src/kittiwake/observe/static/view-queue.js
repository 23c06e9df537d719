// One queue: its counts and rates (pushed by the stream), and three tabs:
// the tasks (a peek, paged by pid), the leased sample, and the dead letters.
// Requeueing or deleting a dead letter and cancelling a task ask first, in
// place; what the broker refuses is shown where the button was.

import { getJson, postJson } from "./api.js";
import { h, clear, errorBox, emptyRow, badge } from "./dom.js";
import { count, rate, duration, ago, time, preview } from "./format.js";
import { routeHash } from "./routes.js";
import { Refresher } from "./refresher.js";

const PAGE = 50;
const TABS = [
  { key: "tasks", label: "Tasks" },
  { key: "leased", label: "Leased" },
  { key: "dead", label: "Dead letters" },
];
const STATE_TONES = { available: "blue", leased: "amber", blocked: "neutral", delayed: "neutral" };
const RELOAD_PAUSE_MS = 1000;

// what each action says, sends and answers
const ACTIONS = {
  requeue: {
    path: "/api/queue/requeue-dead", verb: "Requeue", result: "requeued",
    done: (n) => `Requeued ${n} dead letter${n === 1 ? "" : "s"}.`,
  },
  purge: {
    path: "/api/queue/purge-dead", verb: "Delete", result: "purged", danger: true,
    done: (n) => `Deleted ${n} dead letter${n === 1 ? "" : "s"}.`,
  },
  cancel: {
    path: "/api/queue/cancel", verb: "Cancel", result: "cancelled", danger: true,
    done: (n) => `Cancelled ${n} task${n === 1 ? "" : "s"}: ${n === 1 ? "it is" : "they are"} in the dead letters now.`,
  },
};

export class QueueView {
  constructor(app, route) {
    this.app = app;
    this.name = route.arg || "";
    this.title = this.name;
    this.tab = TABS.some((tab) => tab.key === route.params.tab) ? route.params.tab : "tasks";
    this.stats = null;
    this.leased = [];
    this.lists = { tasks: new PagedList("tasks"), dead: new PagedList("dead") };
    this.pending = null; // {action, pids}: the action waiting for its confirmation
    this.selected = new Set(); // dead letters ticked for a bulk action
    this.reloadTimer = null;
    this.missing = false; // the queue holds nothing, not even dead letters: the broker does not know it
    this.refresher = new Refresher(app, () => {
      if (this.missing) this.loadStats();
    });

    this.statsBox = h("div", { class: "stat-grid", testid: "queue-stats" });
    this.tabBar = h("div", { class: "tabs", role: "tablist" });
    this.notice = h("div", { class: "notice-slot" });
    this.content = h("div", { class: "tab-content" });
    this.element = h("div", { class: "view view-queue", testid: "view-queue", dataset: { queue: this.name } },
      h("div", { class: "crumbs" }, h("a", { class: "link", href: "#/queues", testid: "back-to-queues" }, "Queues"), h("span", { class: "sep" }, "/")),
      h("h1", { class: "page-title", testid: "queue-name" }, this.name),
      h("section", { class: "panel" }, this.statsBox),
      h("section", { class: "panel" }, this.tabBar, this.notice, this.content));
    // Escape takes back a question; its buttons take the focus when it is asked
    this.element.addEventListener("keydown", (event) => {
      if (event.key === "Escape" && this.pending) {
        this.pending = null;
        this.renderTab();
      }
    });
    this.renderStats();
    this.renderTabs();
    this.loadStats();
    this.loadTab();
  }

  streamQuery() {
    // a queue the broker does not know refuses its stream: follow the overview until it comes back
    return this.missing ? { view: "overview" } : { view: "queue", name: this.name };
  }

  update(route) {
    const tab = TABS.some((item) => item.key === route.params.tab) ? route.params.tab : "tasks";
    if (tab === this.tab) return;
    this.tab = tab;
    this.pending = null;
    clear(this.notice);
    this.renderTabs();
    this.renderTab();
    this.loadTab();
  }

  refresh() {
    this.loadStats();
    this.loadTab();
  }

  async loadStats() {
    try {
      this.onQueue(await getJson("/api/queue", { name: this.name }));
    } catch (error) {
      if (error.code === "QUEUE_NOT_FOUND") this.setMissing(true);
      else clear(this.statsBox, errorBox(error, "queue-error"));
    }
  }

  onStreamError(error) {
    if (error.code === "QUEUE_NOT_FOUND") this.setMissing(true);
    else clear(this.statsBox, errorBox(error, "queue-error"));
  }

  setMissing(missing) {
    const changed = missing !== this.missing;
    this.missing = missing;
    if (missing) {
      this.stats = null;
      this.leased = [];
      for (const list of Object.values(this.lists)) {
        list.rows = [];
        list.next = null;
        list.loaded = true;
      }
      this.renderStats();
      this.renderTabs();
      this.renderTab();
    }
    if (changed) this.app.openStream();
  }

  onQueue(answer) {
    if (this.missing) {
      this.setMissing(false);
      this.loadTab();
    }
    const before = this.stats;
    this.stats = answer.stats;
    this.leased = answer.leased || [];
    this.renderStats();
    this.renderTabs();
    if (this.tab === "leased") this.renderTab();
    // tasks came or went: the list on screen is stale, fetch it again (at most once a second)
    if (before && (before.size !== this.stats.size || before.dead !== this.stats.dead)) this.scheduleReload();
  }

  scheduleReload() {
    if (this.reloadTimer) return;
    this.reloadTimer = setTimeout(() => {
      this.reloadTimer = null;
      this.loadTab();
    }, RELOAD_PAUSE_MS);
  }

  async loadTab() {
    const list = this.lists[this.tab];
    if (!list) return;
    const path = this.tab === "tasks" ? "/api/queue/tasks" : "/api/queue/dead";
    const sequence = ++list.sequence;
    try {
      const answer = await getJson(path, { name: this.name, from: list.from, limit: PAGE });
      if (sequence !== list.sequence) return;
      list.rows = answer[this.tab === "tasks" ? "tasks" : "dead"] || [];
      list.next = answer.next;
      list.error = null;
      list.loaded = true;
    } catch (error) {
      if (sequence !== list.sequence) return;
      if (error.code === "QUEUE_NOT_FOUND") {
        this.setMissing(true);
        return;
      }
      list.error = error;
    }
    const pids = new Set(list.rows.map((row) => row.pid));
    if (this.pending && !this.pending.pids.every((pid) => pids.has(pid))) this.pending = null;
    if (this.tab === "dead") for (const pid of [...this.selected]) if (!pids.has(pid)) this.selected.delete(pid);
    this.renderTab();
  }

  renderStats() {
    if (this.missing) {
      clear(this.statsBox, h("div", { class: "stat-empty", testid: "queue-missing" },
        "This queue holds no task and no dead letter now. The page follows it: what is enqueued shows here."));
      return;
    }
    const stats = this.stats || {};
    const item = (key, label, value, detail, tone) => h("div", { class: `stat${tone ? ` tone-${tone}` : ""}`, testid: `stat-${key}` },
      h("div", { class: "stat-label" }, label),
      h("div", { class: "stat-value", testid: `stat-${key}-value` }, value),
      detail ? h("div", { class: "stat-detail" }, detail) : null);
    clear(this.statsBox,
      item("size", "Size", count(stats.size)),
      item("available", "Available", count(stats.available)),
      item("leased", "Leased", count(stats.leased)),
      item("blocked", "Blocked", count(stats.blocked)),
      item("dead", "Dead letters", count(stats.dead), null, stats.dead ? "red" : null),
      item("enqueue_rate", "Enqueued /s", rate(stats.enqueue_rate), `5 min: ${rate(stats.enqueue_rate_5m)}`),
      item("lease_rate", "Leased /s", rate(stats.lease_rate), `5 min: ${rate(stats.lease_rate_5m)}`),
      item("dequeue_rate", "Dequeued /s", rate(stats.dequeue_rate), `5 min: ${rate(stats.dequeue_rate_5m)}`),
      item("avg_lease_secs", "Average lease", duration(stats.avg_lease_secs)),
      item("oldest_age_secs", "Oldest task", duration(stats.oldest_age_secs)),
    );
  }

  renderTabs() {
    const stats = this.stats || {};
    const counts = { tasks: stats.size, leased: stats.leased, dead: stats.dead };
    clear(this.tabBar, ...TABS.map((tab) => h("a", {
      class: `tab${tab.key === this.tab ? " active" : ""}`,
      role: "tab",
      "aria-selected": String(tab.key === this.tab),
      href: routeHash("queue", this.name, tab.key === "tasks" ? {} : { tab: tab.key }),
      testid: `tab-${tab.key}`,
    }, tab.label, counts[tab.key] !== undefined ? h("span", { class: "tab-count" }, count(counts[tab.key])) : null)));
  }

  renderTab() {
    if (this.tab === "leased") {
      clear(this.content, this.leasedTable());
      return;
    }
    const list = this.lists[this.tab];
    const table = this.tab === "tasks" ? this.tasksTable(list) : this.deadTable(list);
    clear(this.content,
      list.error ? errorBox(list.error, `${this.tab}-error`) : null,
      this.tab === "dead" ? this.bulkBar(list) : null,
      table,
      this.pager(list),
    );
    if (this.pending && this.pending.focus) {
      this.pending.focus = false;
      const yes = this.content.querySelector("[data-testid=confirm-yes]");
      if (yes) yes.focus();
    }
  }

  pager(list) {
    return h("div", { class: "pager" },
      h("span", { class: "pager-range", testid: `${list.kind}-page` },
        list.loaded ? `Page ${list.stack.length + 1}${list.rows.length ? `, ${count(list.rows.length)} shown` : ""}` : ""),
      h("span", { class: "pager-gap" }),
      h("button", {
        type: "button", class: "button", testid: `${list.kind}-first`, disabled: !list.stack.length,
        onclick: () => this.turn(list, "first"),
      }, "« First"),
      h("button", {
        type: "button", class: "button", testid: `${list.kind}-prev`, disabled: !list.stack.length,
        onclick: () => this.turn(list, "previous"),
      }, "‹ Previous"),
      h("button", {
        type: "button", class: "button", testid: `${list.kind}-next`, disabled: !list.next,
        onclick: () => this.turn(list, "next"),
      }, "Next ›"));
  }

  turn(list, where) {
    list.turn(where);
    this.pending = null;
    this.loadTab();
  }

  tasksTable(list) {
    const body = h("tbody", { testid: "tasks-body" });
    if (list.loaded && !list.rows.length) body.append(emptyRow(7, "The queue is empty.", "tasks-empty"));
    for (const task of list.rows) {
      body.append(h("tr", { testid: "task-row", dataset: { pid: task.pid } },
        h("td", { class: "mono pid", title: task.pid }, task.pid),
        h("td", {}, badge(task.state, STATE_TONES[task.state])),
        h("td", { class: "num" }, count(task.attempts)),
        h("td", { class: "num", title: time(task.enqueued_at) }, ago(task.enqueued_at)),
        h("td", { class: "mono muted" }, task.lease_owner || ""),
        h("td", { class: "data", title: preview(task.data, task.data_encoding, 2000) }, preview(task.data, task.data_encoding)),
        h("td", { class: "actions" }, this.actionCell("cancel", [task.pid]))));
    }
    return h("div", { class: "table-wrap" }, h("table", { class: "table", testid: "tasks-table" },
      h("thead", {}, h("tr", {},
        h("th", {}, "Task"), h("th", {}, "State"), h("th", { class: "num" }, "Attempts"),
        h("th", { class: "num" }, "Enqueued"), h("th", {}, "Leased by"), h("th", {}, "Data"), h("th", { class: "actions" }, ""))),
      body));
  }

  deadTable(list) {
    const body = h("tbody", { testid: "dead-body" });
    if (list.loaded && !list.rows.length) body.append(emptyRow(7, "No dead letters.", "dead-empty"));
    for (const dead of list.rows) {
      const tick = h("input", { type: "checkbox", "aria-label": `Select ${dead.pid}`, testid: "dead-select" });
      tick.checked = this.selected.has(dead.pid);
      tick.addEventListener("change", () => {
        if (tick.checked) this.selected.add(dead.pid);
        else this.selected.delete(dead.pid);
        this.renderTab();
      });
      body.append(h("tr", { testid: "dead-row", dataset: { pid: dead.pid, taskPid: dead.task_pid } },
        h("td", { class: "check" }, tick),
        h("td", { class: "mono pid", title: dead.pid }, dead.task_pid || dead.pid),
        h("td", { class: "reason", testid: "dead-reason", title: dead.reason || "" }, dead.reason || "—"),
        h("td", { class: "num" }, count(dead.attempts)),
        h("td", { class: "num", title: time(dead.died_at) }, ago(dead.died_at)),
        h("td", { class: "data", title: preview(dead.data, dead.data_encoding, 2000) }, preview(dead.data, dead.data_encoding)),
        h("td", { class: "actions" }, this.actionCell("requeue", [dead.pid]), this.actionCell("purge", [dead.pid], true))));
    }
    const all = h("input", { type: "checkbox", "aria-label": "Select all shown", testid: "dead-select-all" });
    all.checked = list.rows.length > 0 && list.rows.every((row) => this.selected.has(row.pid));
    all.addEventListener("change", () => {
      for (const row of list.rows) {
        if (all.checked) this.selected.add(row.pid);
        else this.selected.delete(row.pid);
      }
      this.renderTab();
    });
    return h("div", { class: "table-wrap" }, h("table", { class: "table", testid: "dead-table" },
      h("thead", {}, h("tr", {},
        h("th", { class: "check" }, all), h("th", {}, "Task"), h("th", {}, "Reason"), h("th", { class: "num" }, "Attempts"),
        h("th", { class: "num" }, "Died"), h("th", {}, "Data"), h("th", { class: "actions" }, ""))),
      body));
  }

  bulkBar(list) {
    const pids = list.rows.map((row) => row.pid).filter((pid) => this.selected.has(pid));
    if (!pids.length) return null;
    return h("div", { class: "bulk-bar", testid: "dead-bulk" },
      h("span", {}, `${count(pids.length)} selected`),
      this.actionCell("requeue", pids, false, true),
      this.actionCell("purge", pids, true, true));
  }

  // a button, or, once pressed, the question with Confirm and Keep
  actionCell(action, pids, quiet = false, bulk = false) {
    const spec = ACTIONS[action];
    const key = `${action}:${pids.join(",")}`;
    if (this.pending && this.pending.key === key) {
      const what = pids.length === 1 ? (action === "cancel" ? "this task" : "this dead letter") : `${count(pids.length)} ${action === "cancel" ? "tasks" : "dead letters"}`;
      return h("span", { class: "confirm", testid: "confirm" },
        h("span", { class: "confirm-question" }, `${spec.verb} ${what}?`),
        h("button", {
          type: "button", class: `button button-small ${spec.danger ? "button-danger" : "button-primary"}`,
          testid: "confirm-yes", onclick: () => this.run(action, pids),
        }, spec.verb),
        h("button", {
          type: "button", class: "button button-small button-quiet", testid: "confirm-no",
          onclick: () => {
            this.pending = null;
            this.renderTab();
          },
        }, "Keep"));
    }
    return h("button", {
      type: "button",
      class: `button button-small ${quiet || spec.danger ? "button-quiet" : ""}${spec.danger ? " danger-text" : ""}`,
      testid: bulk ? `bulk-${action}` : `${action === "purge" ? "purge-dead" : action === "requeue" ? "requeue-dead" : "cancel-task"}`,
      onclick: () => {
        this.pending = { key, action, pids, bulk, focus: true };
        clear(this.notice);
        this.renderTab();
      },
    }, spec.verb);
  }

  async run(action, pids) {
    const spec = ACTIONS[action];
    this.pending = null;
    this.renderTab();
    try {
      const answer = await postJson(spec.path, { queue: this.name, pids });
      const done = answer && typeof answer[spec.result] === "number" ? answer[spec.result] : pids.length;
      const failed = (answer && answer.failed) || [];
      for (const pid of pids) this.selected.delete(pid);
      clear(this.notice,
        done || !failed.length ? h("div", { class: "notice", role: "status", testid: "action-notice" }, spec.done(done)) : null,
        failed.length ? h("div", { class: "error-box", role: "alert", testid: "action-error" },
          h("div", {}, `${count(failed.length)} not done:`),
          failed.slice(0, 10).map((item) => h("div", { class: "small" },
            h("span", { class: "error-code" }, item.code), `${item.pid}: ${item.message}`))) : null);
    } catch (error) {
      clear(this.notice, errorBox(error, "action-error"));
    }
    this.loadStats();
    this.loadTab();
  }

  leasedTable() {
    const body = h("tbody", { testid: "leased-body" });
    if (!this.leased.length) body.append(emptyRow(5, "No task of this queue is leased.", "leased-empty"));
    for (const lease of this.leased) {
      body.append(h("tr", { testid: "leased-row", dataset: { pid: lease.pid } },
        h("td", { class: "mono pid", title: lease.pid }, lease.pid),
        h("td", { class: "mono" }, lease.worker || "—"),
        h("td", { class: "mono muted" }, lease.peer || "—"),
        h("td", { class: "num", title: time(lease.leased_at) }, ago(lease.leased_at)),
        h("td", { class: "num", title: time(lease.expires_at) },
          lease.expires_at ? `in ${duration(lease.expires_at - Date.now() / 1000)}` : "—")));
    }
    return h("div", { class: "table-wrap" }, h("table", { class: "table", testid: "leased-table" },
      h("thead", {}, h("tr", {},
        h("th", {}, "Task"), h("th", {}, "Worker"), h("th", {}, "Connection"),
        h("th", { class: "num" }, "Leased"), h("th", { class: "num" }, "Expires"))),
      body),
    h("p", { class: "muted small" }, "A sample of up to 50 leased tasks."));
  }

  destroy() {
    clearTimeout(this.reloadTimer);
    this.refresher.destroy();
  }
}

// A list paged by pid: `from` is the first pid of the page on screen, `stack`
// the pages before it, `next` where the following page starts.
class PagedList {
  constructor(kind) {
    this.kind = kind;
    this.from = null;
    this.stack = [];
    this.next = null;
    this.rows = [];
    this.error = null;
    this.loaded = false;
    this.sequence = 0;
  }

  turn(where) {
    if (where === "next" && this.next) {
      this.stack.push(this.from);
      this.from = this.next;
    } else if (where === "previous" && this.stack.length) {
      this.from = this.stack.pop();
    } else if (where === "first") {
      this.stack = [];
      this.from = null;
    }
  }
}
