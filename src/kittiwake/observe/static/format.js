// Numbers, rates, durations and times as people read them.

const integer = new Intl.NumberFormat("en-US", { maximumFractionDigits: 0 });
const DASH = "—";

export function count(value) {
  return value === null || value === undefined ? DASH : integer.format(value);
}

// per second: two decimals below 0.1, one below 10, whole numbers above
export function rate(value) {
  if (value === null || value === undefined) return DASH;
  if (value === 0) return "0";
  if (value < 0.1) return value.toFixed(2);
  if (value < 10) return value.toFixed(1);
  return integer.format(Math.round(value));
}

export function duration(secs) {
  if (secs === null || secs === undefined || Number.isNaN(secs)) return DASH;
  if (secs < 0) secs = 0;
  if (secs < 1) return `${Math.round(secs * 1000)} ms`;
  if (secs < 10) return `${secs.toFixed(1)} s`;
  if (secs < 60) return `${Math.round(secs)} s`;
  const minutes = Math.floor(secs / 60);
  if (minutes < 60) return `${minutes}m ${String(Math.floor(secs % 60)).padStart(2, "0")}s`;
  const hours = Math.floor(minutes / 60);
  if (hours < 24) return `${hours}h ${String(minutes % 60).padStart(2, "0")}m`;
  return `${Math.floor(hours / 24)}d ${hours % 24}h`;
}

// a short axis label for seconds: 0, 250ms, 1.5s, 2m
export function durationShort(secs) {
  if (secs === 0) return "0";
  if (secs < 1) return `${+(secs * 1000).toPrecision(3)}ms`;
  if (secs < 60) return `${+secs.toPrecision(3)}s`;
  if (secs < 3600) return `${+(secs / 60).toPrecision(3)}m`;
  return `${+(secs / 3600).toPrecision(3)}h`;
}

export function ago(unixSecs, nowSecs = Date.now() / 1000) {
  if (unixSecs === null || unixSecs === undefined) return DASH;
  const secs = nowSecs - unixSecs;
  if (secs < 1) return "just now";
  return `${duration(secs)} ago`;
}

function pad(number) {
  return String(number).padStart(2, "0");
}

export function time(unixSecs) {
  if (unixSecs === null || unixSecs === undefined) return DASH;
  const date = new Date(unixSecs * 1000);
  return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())} ` +
    `${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}`;
}

export function clock(unixSecs) {
  const date = new Date(unixSecs * 1000);
  return `${pad(date.getHours())}:${pad(date.getMinutes())}`;
}

export function percent(fraction) {
  if (fraction === null || fraction === undefined) return DASH;
  return `${Math.round(fraction * 100)}%`;
}

// Task data as a one-line preview: text cut at `limit` characters, binary as its size.
export function preview(data, encoding, limit = 96) {
  if (data === null || data === undefined) return "";
  if (encoding === "base64") {
    const bytes = Math.floor((data.length * 3) / 4) - (data.endsWith("==") ? 2 : data.endsWith("=") ? 1 : 0);
    return `binary, ${integer.format(bytes)} bytes`;
  }
  const text = String(data).replace(/\s+/g, " ").trim();
  return text.length > limit ? `${text.slice(0, limit - 1)}…` : text;
}
