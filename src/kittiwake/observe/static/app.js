// The dashboard: the session, the hash routes, the overview strip and the one
// event stream of the view on screen.
//
// A view is a class with `element`, `streamQuery()` (the /api/stream
// parameters it wants), and optionally `update(route)` (same view, new
// parameters), `refresh()` (fetch again after the stream dropped), `tick()`
// (every second, for relative times), `onQueues`/`onQueue`/`onStreamError`
// (its stream events) and `destroy()`. A view whose stream parameters change
// (its queue vanished, its filter was refused) calls `app.openStream()`. The app keeps one stream open for the view on
// screen; its `overview` and `history` events feed the strip and the charts.

import { getJson, request, onUnauthorized, queryString, Stream } from "./api.js";
import { h, clear } from "./dom.js";
import { duration } from "./format.js";
import { renderOverview } from "./overview.js";
import { showLogin } from "./login.js";
import { QueuesView } from "./view-queues.js";
import { QueueView } from "./view-queue.js";
import { WorkersView } from "./view-workers.js";
import { JobsView } from "./view-jobs.js";
import { FlowsView } from "./view-flows.js";
import { ChartsView } from "./view-charts.js";
import { ClusterView } from "./view-cluster.js";
import { parseRoute } from "./routes.js";

const VIEWS = {
  queues: QueuesView,
  queue: QueueView,
  workers: WorkersView,
  jobs: JobsView,
  flows: FlowsView,
  charts: ChartsView,
  cluster: ClusterView,
};
const HISTORY_WINDOW_SECS = 3600;

const main = document.getElementById("main");
const nav = document.querySelector("[data-testid=nav]");
const clusterLink = document.querySelector("[data-testid=nav-cluster]");
const strip = document.querySelector("[data-testid=overview]");
const brokerInfo = document.querySelector("[data-testid=broker-info]");
const streamStatus = document.querySelector("[data-testid=stream-status]");
const userBox = document.querySelector("[data-testid=user]");
const userName = document.querySelector("[data-testid=user-name]");
const logoutButton = document.querySelector("[data-testid=logout]");

class History {
  constructor() {
    this.stepSecs = 10;
    this.points = [];
    this.listeners = new Set();
    this.available = true;
  }

  set(answer) {
    this.stepSecs = answer.step_secs || 10;
    // oldest first; a point no later than the one before closes no step of its own (it would
    // draw as a drop to zero), so only the first at each time is kept
    this.points = [];
    for (const point of answer.points || []) {
      const last = this.points[this.points.length - 1];
      if (point && typeof point.t === "number" && (!last || point.t > last.t)) this.points.push(point);
    }
    this.notify();
  }

  add(point) {
    if (!point || typeof point.t !== "number") return;
    const last = this.points[this.points.length - 1];
    if (last && point.t <= last.t) return;
    this.points.push(point);
    const start = point.t - HISTORY_WINDOW_SECS;
    while (this.points.length && this.points[0].t <= start) this.points.shift();
    this.notify();
  }

  subscribe(listener) {
    this.listeners.add(listener);
    listener(this);
    return () => this.listeners.delete(listener);
  }

  notify() {
    for (const listener of this.listeners) listener(this);
  }
}

class App {
  constructor() {
    this.session = null;
    this.overview = null;
    this.overviewListeners = new Set();
    this.history = new History();
    this.view = null;
    this.viewName = null;
    this.viewArg = null;
    this.stream = null;
    this.started = false;
    this.ticker = null;
    this.onHashChange = () => this.route();
    onUnauthorized(() => this.sessionEnded());
    logoutButton.addEventListener("click", () => this.logout());
  }

  async boot() {
    let session;
    try {
      session = await getJson("/api/session");
    } catch (error) {
      this.fatal(error);
      return;
    }
    this.session = session;
    if (session.auth && !session.user) this.login();
    else this.start();
  }

  fatal(error) {
    clear(main, h("div", { class: "placeholder", testid: "fatal" },
      "The broker's API cannot be reached: ", error.message || String(error)));
  }

  login(message) {
    this.stop();
    showLogin(main, {
      message,
      done: (session) => {
        this.session = session;
        this.start();
      },
    });
  }

  sessionEnded() {
    if (!this.started) return;
    this.login("The session ended: log in again.");
  }

  async logout() {
    try {
      await request("DELETE", "/api/session");
    } catch {
      // logged out or not, the form comes back
    }
    this.session = { auth: true, user: null };
    this.login();
  }

  start() {
    this.started = true;
    nav.hidden = false;
    strip.hidden = false;
    streamStatus.hidden = false;
    userBox.hidden = !(this.session && this.session.auth);
    userName.textContent = this.session && this.session.user ? this.session.user : "";
    window.addEventListener("hashchange", this.onHashChange);
    this.ticker = setInterval(() => this.tick(), 1000);
    this.loadOverview();
    this.loadHistory();
    this.route();
  }

  stop() {
    this.started = false;
    window.removeEventListener("hashchange", this.onHashChange);
    clearInterval(this.ticker);
    this.closeStream();
    if (this.view && this.view.destroy) this.view.destroy();
    this.view = null;
    this.viewName = null;
    nav.hidden = true;
    strip.hidden = true;
    streamStatus.hidden = true;
    userBox.hidden = true;
    brokerInfo.textContent = "";
  }

  async loadOverview() {
    try {
      this.setOverview(await getJson("/api/overview"));
    } catch (error) {
      if (error.status !== 401) clear(strip, h("div", { class: "overview-error" }, error.message));
    }
  }

  async loadHistory() {
    try {
      this.history.available = true;
      this.history.set(await getJson("/api/history"));
    } catch {
      this.history.available = false;
      this.history.notify();
    }
  }

  setOverview(overview) {
    this.overview = overview;
    renderOverview(strip, overview);
    clusterLink.hidden = !(overview.broker && overview.broker.node); // a cluster node only
    this.renderBrokerInfo();
    for (const listener of this.overviewListeners) listener(overview);
  }

  onOverview(listener) {
    this.overviewListeners.add(listener);
    return () => this.overviewListeners.delete(listener);
  }

  renderBrokerInfo() {
    const broker = this.overview && this.overview.broker;
    if (!broker) return;
    const uptime = broker.started_at ? Date.now() / 1000 - broker.started_at : broker.uptime_secs;
    brokerInfo.replaceChildren(
      h("span", { testid: "broker-version" }, `v${broker.version}`),
      h("span", { class: "sep" }, "·"),
      h("span", { testid: "broker-store" }, broker.store),
      h("span", { class: "sep" }, "·"),
      h("span", { testid: "broker-uptime" }, `up ${duration(uptime)}`),
    );
  }

  tick() {
    this.renderBrokerInfo();
    if (this.view && this.view.tick) this.view.tick();
  }

  navigate(hash, { replace = false } = {}) {
    if (hash === location.hash) return;
    if (replace) history.replaceState(null, "", hash);
    else history.pushState(null, "", hash);
    this.route();
  }

  route() {
    if (!this.started) return;
    const route = parseRoute(location.hash, VIEWS);
    const same = this.view && this.viewName === route.name && this.viewArg === route.arg;
    if (same && this.view.update) {
      this.view.update(route);
    } else {
      if (this.view && this.view.destroy) this.view.destroy();
      const View = VIEWS[route.name];
      this.view = new View(this, route);
      this.viewName = route.name;
      this.viewArg = route.arg;
      clear(main, this.view.element);
      window.scrollTo(0, 0);
    }
    document.title = `${this.view.title || "Dashboard"} · Kittiwake`;
    for (const link of nav.querySelectorAll("a")) {
      const current = link.dataset.route === route.name || (route.name === "queue" && link.dataset.route === "queues");
      if (current) link.setAttribute("aria-current", "page");
      else link.removeAttribute("aria-current");
    }
    this.openStream();
  }

  // (re)open the stream when the view on screen wants other events
  openStream() {
    if (!this.view) return;
    const url = `/api/stream${queryString(this.view.streamQuery())}`;
    if (this.stream && this.stream.url === url) return;
    this.closeStream();
    const view = this.view;
    this.stream = new Stream(url, {
      handlers: {
        overview: (data) => this.setOverview(data),
        history: (point) => this.history.add(point),
        queues: (data) => view.onQueues && view.onQueues(data),
        queue: (data) => view.onQueue && view.onQueue(data),
        error: (data) => this.streamError(view, data.error || {}),
      },
      onStatus: (status) => this.showStreamStatus(status),
      onReopen: () => {
        this.loadOverview();
        this.loadHistory();
        if (view.refresh) view.refresh();
      },
      onClosed: () => this.checkSession(),
    });
    this.stream.open();
  }

  // a view that failed while the stream runs (its queue emptied, the store failed) or a session that ended
  streamError(view, error) {
    if (error.code === "UNAUTHORIZED") this.checkSession();
    else if (view.onStreamError) view.onStreamError(error);
  }

  closeStream() {
    if (this.stream) this.stream.close();
    this.stream = null;
  }

  async checkSession() {
    try {
      const session = await getJson("/api/session");
      if (session.auth && !session.user) this.sessionEnded();
    } catch {
      // the broker is away: the stream keeps trying
    }
  }

  showStreamStatus(status) {
    streamStatus.dataset.state = status;
    const labels = { connecting: "Connecting…", live: "Live", reconnecting: "Reconnecting…" };
    streamStatus.querySelector(".label").textContent = labels[status] || status;
    streamStatus.title = status === "live" ? "Updates arrive as they happen" : "Waiting for the broker";
  }
}

const app = new App();
window.kittiwake = app; // for people poking at the page from the console
app.boot();
