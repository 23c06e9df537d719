// The Cluster view, on a cluster node only: the map (nodes, addresses,
// slots, epoch), each node up or down and when this node last heard from it,
// what each node holds, which nodes hold tasks of each spread queue, and how
// far the worst node lies from the mean (/api/cluster). A peer goes down or
// fills up without this node's overview changing, so besides following the
// overview (`Refresher`) it asks again every few seconds while on screen; the
// broker asks its peers at most once a second however many pages ask.

import { getJson } from "./api.js";
import { h, clear, panel, emptyRow, badge, errorBox } from "./dom.js";
import { count, ago, time } from "./format.js";
import { Refresher } from "./refresher.js";

const NODE_COLUMNS = 11;
const POLL_MS = 5000;

function nodeState(node) {
  if (!node.up) return ["down", "red"];
  if (node.self) return ["this node", "blue"];
  return ["up", "green"];
}

function deviationTone(percent) {
  if (percent >= 25) return "red";
  if (percent >= 10) return "amber";
  return "green";
}

export class ClusterView {
  constructor(app) {
    this.title = "Cluster";
    this.cluster = null;
    this.sequence = 0;
    this.error = h("div", { class: "inline-error" });
    this.summary = h("span", { class: "panel-note", testid: "cluster-summary" });
    this.body = h("tbody", { testid: "cluster-nodes-body" }, emptyRow(NODE_COLUMNS, "Loading…"));
    this.holdersNote = h("span", { class: "panel-note", testid: "cluster-holders-note" });
    this.holdersBody = h("tbody", { testid: "cluster-holders-body" }, emptyRow(2, "Loading…"));
    this.element = h("div", { class: "view", testid: "view-cluster" },
      panel({ title: "Cluster", testid: "cluster-panel", tools: [this.summary] },
        this.error,
        h("div", { class: "table-wrap" }, h("table", { class: "table", testid: "cluster-nodes" },
          h("thead", {}, h("tr", {},
            h("th", {}, "Node"), h("th", {}, "State"), h("th", {}, "Address"), h("th", { class: "num" }, "Slots"),
            h("th", {}, "Epoch"), h("th", { class: "num" }, "Last heard"), h("th", { class: "num" }, "Queues"),
            h("th", { class: "num" }, "Tasks"), h("th", { class: "num" }, "Available"), h("th", { class: "num" }, "Leased"),
            h("th", { class: "num", title: "Spread queues it holds available tasks of, as this node knows" }, "Holding"))),
          this.body))),
      panel({ title: "Holders of spread queues", testid: "cluster-holders-panel", tools: [this.holdersNote] },
        h("div", { class: "table-wrap" }, h("table", { class: "table table-compact", testid: "cluster-holders" },
          h("thead", {}, h("tr", {}, h("th", {}, "Queue"), h("th", {}, "Nodes holding available tasks"))),
          this.holdersBody))));
    this.refresher = new Refresher(app, () => this.load());
    this.refresher.now();
    this.poller = setInterval(() => this.load(), POLL_MS);
  }

  streamQuery() {
    return { view: "overview" };
  }

  refresh() {
    this.load();
  }

  tick() {
    if (this.cluster) this.render();
  }

  async load() {
    const sequence = ++this.sequence;
    try {
      const cluster = await getJson("/api/cluster");
      if (sequence !== this.sequence) return;
      this.cluster = cluster;
      clear(this.error);
      this.render();
    } catch (error) {
      if (sequence !== this.sequence) return;
      clear(this.error, errorBox(error, "cluster-error"));
      if (this.cluster === null) clear(this.body, emptyRow(NODE_COLUMNS, "Nothing to show."));
    }
  }

  render() {
    const cluster = this.cluster;
    const nodes = cluster.nodes || [];
    clear(this.summary,
      `${count(cluster.up)} of ${count(nodes.length)} up · epoch `,
      h("span", { class: "mono", testid: "cluster-epoch" }, cluster.epoch),
      ` · ${count(cluster.slots)} slots · load deviation `,
      badge(`${cluster.load_deviation}%`, deviationTone(cluster.load_deviation), "cluster-deviation"));
    clear(this.body);
    for (const node of nodes) {
      const [state, tone] = nodeState(node);
      const heard = node.self ? "—" : ago(node.last_heard_at);
      const heardTitle = node.self ? "" : [
        `last announcement from it: ${time(node.last_heard_at)}`,
        `last announcement to it: ${time(node.last_told_at)}${node.announcing ? ` (${node.announcing})` : ""}`,
        node.error ? `error: ${node.error}` : null,
      ].filter(Boolean).join("\n");
      this.body.append(h("tr", { testid: "cluster-node-row", dataset: { node: node.name, state: node.up ? "up" : "down" } },
        h("td", { class: "mono" }, node.name),
        h("td", { title: node.error || "" }, badge(state, tone, "cluster-node-state")),
        h("td", { class: "mono" }, node.address),
        h("td", { class: "num" }, count(node.slots)),
        h("td", { class: "mono" }, node.epoch || "—"),
        h("td", { class: "num", title: heardTitle }, heard),
        h("td", { class: "num" }, count(node.queues), node.truncated ? "+" : ""),
        h("td", { class: "num", testid: "cluster-node-tasks" }, node.up ? count(node.tasks) : "—"),
        h("td", { class: "num" }, node.up ? count(node.available) : "—"),
        h("td", { class: "num" }, node.up ? count(node.leased) : "—"),
        h("td", { class: "num" }, count(node.holding))));
    }
    const holders = cluster.holders || [];
    this.holdersNote.textContent = cluster.holders_total > holders.length
      ? `the first ${count(holders.length)} of ${count(cluster.holders_total)}` : `${count(holders.length)} queue(s)`;
    clear(this.holdersBody);
    if (!holders.length) this.holdersBody.append(emptyRow(2, "No node is known to hold available tasks.", "cluster-holders-empty"));
    for (const entry of holders) {
      this.holdersBody.append(h("tr", { testid: "cluster-holder-row", dataset: { queue: entry.queue } },
        h("td", { class: "mono" }, entry.queue),
        h("td", {}, entry.nodes.join(", "))));
    }
  }

  destroy() {
    clearInterval(this.poller);
    this.refresher.destroy();
  }
}
