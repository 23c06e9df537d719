// The broker's JSON API and its event stream, as the page uses them.
//
// Reads are GET with query parameters; writes are POST with a JSON body (the
// broker refuses anything else). Errors arrive as {"error": {"code", "message"}}
// and become an ApiError the views show inline. A 401 anywhere means the
// session ended: `onUnauthorized` lets the app show the login form again.

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

let unauthorized = () => {};

export function onUnauthorized(callback) {
  unauthorized = callback;
}

export function queryString(params) {
  const search = new URLSearchParams();
  for (const [key, value] of Object.entries(params || {})) {
    if (value !== undefined && value !== null && value !== "") search.set(key, String(value));
  }
  const text = search.toString();
  return text ? `?${text}` : "";
}

export async function getJson(path, params) {
  return request("GET", path + queryString(params));
}

export async function postJson(path, body) {
  return request("POST", path, body);
}

export async function request(method, url, body) {
  const init = { method, credentials: "same-origin", headers: { Accept: "application/json" } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(url, init);
  } catch {
    throw new ApiError(0, "NETWORK", "The broker cannot be reached.");
  }
  const type = response.headers.get("content-type") || "";
  let answer = null;
  if (type.startsWith("application/json")) {
    try {
      answer = await response.json();
    } catch {
      answer = null;
    }
  }
  if (!response.ok) {
    const error = answer && answer.error;
    if (response.status === 401 && !url.startsWith("/api/session")) unauthorized();
    throw new ApiError(
      response.status,
      error ? error.code : `HTTP_${response.status}`,
      error ? error.message : `${response.status} ${response.statusText || "error"}`,
    );
  }
  return answer;
}

// One server-sent event stream: its events go to `handlers[type](data)`.
//
// EventSource reconnects by itself when an established stream drops; when the
// broker answers a reconnect with an error (restarting, or the session ended)
// it gives up, so this reopens it after a growing pause. `onStatus` hears
// "connecting", "live" and "reconnecting"; `onReopen` runs when a stream comes
// back after a drop, so a view can fetch what it missed.
const RETRY_SECS = [1, 2, 3, 5, 8, 10];

export class Stream {
  constructor(url, { handlers, onStatus, onReopen, onClosed }) {
    this.url = url;
    this.handlers = handlers;
    this.onStatus = onStatus || (() => {});
    this.onReopen = onReopen || (() => {});
    this.onClosed = onClosed || (() => {});
    this.source = null;
    this.timer = null;
    this.failures = 0;
    this.dropped = false;
    this.stopped = false;
  }

  open() {
    this.stopped = false;
    this.onStatus(this.dropped ? "reconnecting" : "connecting");
    const source = new EventSource(this.url, { withCredentials: true });
    this.source = source;
    source.onopen = () => {
      this.failures = 0;
      this.onStatus("live");
      if (this.dropped) {
        this.dropped = false;
        this.onReopen();
      }
    };
    source.onerror = () => {
      if (this.stopped || source !== this.source) return;
      this.dropped = true;
      this.onStatus("reconnecting");
      if (source.readyState === EventSource.CLOSED) {
        this.onClosed();
        const pause = RETRY_SECS[Math.min(this.failures, RETRY_SECS.length - 1)];
        this.failures += 1;
        this.timer = setTimeout(() => this.open(), pause * 1000);
      }
    };
    for (const [type, handler] of Object.entries(this.handlers)) {
      source.addEventListener(type, (event) => {
        let data;
        try {
          data = JSON.parse(event.data);
        } catch {
          return;
        }
        handler(data);
      });
    }
  }

  close() {
    this.stopped = true;
    clearTimeout(this.timer);
    if (this.source) this.source.close();
    this.source = null;
  }
}
