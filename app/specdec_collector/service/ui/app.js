// specdec-collector dashboard: plain JavaScript and the vendored uPlot (vendor/), no external
// assets, so it works without internet. Time series are drawn by uPlot; bars per position and
// the histogram (categories, with error bars) are small SVGs in the same palette.
"use strict";

const KEY = "specdec-api-key";
const LIVE_REFRESH_MS = 2000;
const view = document.getElementById("view");

// --- API access: the key is asked once and kept for the browser session ------------------
function askKey(refused) {
  return new Promise((resolve) => {
    const dialog = document.getElementById("key-dialog");
    const form = document.getElementById("key-form");
    const said = document.getElementById("key-refused");
    said.hidden = !refused;
    said.textContent = refused ? `That key was refused: ${refused}` : "";
    form.onsubmit = () => {
      sessionStorage.setItem(KEY, document.getElementById("key-input").value.trim());
      resolve();
    };
    dialog.showModal();
  });
}

async function detailOf(response) {
  try {
    const detail = (await response.json()).detail;
    if (typeof detail === "string") return detail;
    // FastAPI's 422: each problem with the field it names.
    return detail.map((d) => `${(d.loc || []).join(".")}: ${d.msg}`).join("; ");
  } catch (_) {
    return response.statusText;
  }
}

async function request(path, accept = "application/json") {
  for (let attempt = 0; attempt < 3; attempt++) {
    const headers = { Accept: accept };
    const key = sessionStorage.getItem(KEY);
    if (key) headers.Authorization = `Bearer ${key}`;
    const response = await fetch(path, { headers });
    if (response.status === 401) {
      const why = key ? await detailOf(response) : null;
      sessionStorage.removeItem(KEY);
      await askKey(why);
      continue;
    }
    if (!response.ok) throw new Error(`${await detailOf(response)} (HTTP ${response.status})`);
    document.getElementById("forget-key").hidden = !sessionStorage.getItem(KEY);
    return response;
  }
  throw new Error("no valid API key");
}

const api = async (path) => (await request(path)).json();

document.getElementById("forget-key").onclick = () => { sessionStorage.removeItem(KEY); location.reload(); };

// A download of an API answer (the key goes in a header, so a plain link would not do).
async function download(path, filename, accept) {
  const blob = await (await request(path, accept)).blob();
  const link = document.createElement("a");
  link.href = URL.createObjectURL(blob);
  link.download = filename;
  link.click();
  setTimeout(() => URL.revokeObjectURL(link.href), 10000);
}

// --- small helpers -------------------------------------------------------------------------
const esc = (text) => String(text ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
const fmt = (value, digits) => (value === null || value === undefined ? "–" : Number(value).toFixed(digits));
const css = (name) => getComputedStyle(document.documentElement).getPropertyValue(name).trim();
const color = (i) => css(`--c${i % 8}`);
const ZONE = Intl.DateTimeFormat().resolvedOptions().timeZone;
// A time in the viewer's zone, named; the UTC time on hover (the title).
const utcText = (ms) => new Date(ms).toISOString().replace("T", " ").slice(0, 19) + " UTC";
function when(iso) {
  if (!iso) return "–";
  const moment = new Date(iso);
  const local = moment.toLocaleString(undefined, { year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short" });
  return `<time datetime="${esc(iso)}" title="${utcText(moment.getTime())}">${esc(local)}</time>`;
}
const stateBadge = (state) => `<span class="state ${state === "open" ? "open" : "muted"}">${esc(state)}</span>`;
const chips = (labels) => Object.entries(labels || {}).map(([k, v]) => `<span class="chip">${esc(k)}=${esc(v)}</span>`).join("") || `<span class="muted">none</span>`;
// Another engine than vLLM, or a figure that is not exact, is said beside the figures.
const engineTag = (r) => (r.engine && (r.engine !== "vllm" || r.exact === false) ? ` <span class="engine-tag">${esc(r.engine)}${r.exact === false ? ", approximate" : ""}</span>` : "");
const svgNS = "http://www.w3.org/2000/svg";

function svg(width, height, cls) {
  const node = document.createElementNS(svgNS, "svg");
  node.setAttribute("viewBox", `0 0 ${width} ${height}`);
  node.setAttribute("class", `chart ${cls}`);
  node.setAttribute("role", "img");
  return node;
}

function add(parent, tag, attrs, text) {
  const node = document.createElementNS(svgNS, tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, value);
  if (text !== undefined) node.textContent = text;
  parent.appendChild(node);
  return node;
}

function legend(names) {
  const list = document.createElement("ul");
  list.className = "legend";
  list.innerHTML = names.map((name, i) => `<li data-series="${esc(name)}"><span class="swatch" style="background:${color(i)}"></span>${esc(name)}</li>`).join("");
  return list;
}

// A y axis from 0 to `top` with a few ticks and grid lines, and its label.
function yAxis(chart, box, top, ticks, label, unit) {
  const { left, right, y0, y1 } = box;
  add(chart, "line", { class: "axis", x1: left, x2: left, y1: y1, y2: y0 });
  add(chart, "line", { class: "axis", x1: left, x2: right, y1: y0, y2: y0 });
  for (const tick of ticks) {
    const y = y0 - (tick / top) * (y0 - y1);
    add(chart, "line", { class: "grid", x1: left + 1, x2: right, y1: y, y2: y });
    add(chart, "text", { class: "tick", x: left - 4, y: y + 3, "text-anchor": "end" }, `${tick}${unit}`);
  }
  add(chart, "text", { class: "axis-label", x: 10, y: (y0 + y1) / 2, transform: `rotate(-90 10 ${(y0 + y1) / 2})`, "text-anchor": "middle" }, label);
}

// Bars per position; `series` is a list of {name, rates: {"0": 0.9, ...}, intervals}.
function positionChart(series) {
  const positions = [...new Set(series.flatMap((s) => Object.keys(s.rates || {})))].sort((a, b) => a - b);
  const width = 380, height = 200;
  const box = { left: 44, right: width - 8, y0: height - 30, y1: 10 };
  const chart = svg(width, height, "positions");
  chart.dataset.positions = positions.length;
  add(chart, "title", {}, "Acceptance by draft position: the share of drafts whose token there was accepted");
  yAxis(chart, box, 100, [0, 25, 50, 75, 100], "accepted (%)", "");
  const slot = (box.right - box.left) / Math.max(positions.length, 1);
  const barWidth = (slot * 0.8) / Math.max(series.length, 1);
  const scale = (r) => box.y0 - Math.min(Math.max(r, 0), 1) * (box.y0 - box.y1);
  positions.forEach((position, i) => {
    series.forEach((s, j) => {
      const rate = (s.rates || {})[position];
      if (rate === undefined || rate === null) return;
      const x = box.left + i * slot + slot * 0.1 + j * barWidth;
      const bar = add(chart, "rect", { class: `bar b${j}`, x, y: scale(rate), width: Math.max(barWidth - 1, 1), height: box.y0 - scale(rate), fill: color(j) });
      bar.dataset.position = position;
      bar.dataset.rate = rate;
      bar.dataset.series = s.name;
      add(bar, "title", {}, `${s.name}, position ${position}: ${fmt(rate * 100, 1)} %`);
      // Its 95 % interval, where the window was sampled enough: an error bar over the bar.
      const interval = (s.intervals || {})[position];
      if (!interval) return;
      const middle = x + (barWidth - 1) / 2;
      const whisker = add(chart, "path", {
        class: "interval",
        d: `M${middle - 3},${scale(interval.high)}h6M${middle},${scale(interval.high)}V${scale(interval.low)}M${middle - 3},${scale(interval.low)}h6`,
      });
      whisker.dataset.position = position;
      whisker.dataset.low = interval.low;
      whisker.dataset.high = interval.high;
      add(whisker, "title", {}, `${s.name}, position ${position}: 95 % interval ${fmt(interval.low * 100, 1)} to ${fmt(interval.high * 100, 1)} %`);
    });
    add(chart, "text", { class: "tick", x: box.left + i * slot + slot / 2, y: box.y0 + 13, "text-anchor": "middle" }, position);
  });
  add(chart, "text", { class: "axis-label", x: (box.left + box.right) / 2, y: height - 4, "text-anchor": "middle" }, "draft position");
  const figure = document.createElement("figure");
  figure.className = "positions";
  figure.appendChild(chart);
  figure.appendChild(legend(series.map((s) => s.name)));
  return figure;
}

// How many drafts had exactly n tokens accepted, n = 0..k: a histogram.
function distributionChart(distribution) {
  const counts = Object.entries(distribution).sort((a, b) => a[0] - b[0]);
  const width = 380, height = 170;
  const box = { left: 50, right: width - 8, y0: height - 30, y1: 10 };
  const chart = svg(width, height, "distribution");
  const most = Math.max(...counts.map(([, n]) => n), 1);
  const step = 10 ** Math.floor(Math.log10(most));
  const top = Math.ceil(most / step) * step;
  yAxis(chart, box, top, [0, top / 2, top], "drafts", "");
  const slot = (box.right - box.left) / Math.max(counts.length, 1);
  counts.forEach(([accepted, n], i) => {
    const barHeight = (n / top) * (box.y0 - box.y1);
    const bar = add(chart, "rect", { class: "bar b0", x: box.left + i * slot + slot * 0.1, y: box.y0 - barHeight, width: slot * 0.8, height: barHeight, fill: color(0) });
    bar.dataset.accepted = accepted;
    bar.dataset.count = n;
    add(bar, "title", {}, `${n} drafts with ${accepted} accepted`);
    add(chart, "text", { class: "tick", x: box.left + i * slot + slot / 2, y: box.y0 + 13, "text-anchor": "middle" }, accepted);
  });
  add(chart, "text", { class: "axis-label", x: (box.left + box.right) / 2, y: height - 4, "text-anchor": "middle" }, "tokens accepted in a draft");
  return chart;
}

// Throughput and latency beside acceptance (the result's `throughput`), as rows of a list.
function throughputRows(t) {
  if (!t) return "";
  return `<dl class="kv throughput"><dt>Generated tokens/s</dt><dd class="tokens-per-second">${fmt(t.generated_tokens_per_second, 2)}</dd>
    <dt>Inter-token latency</dt><dd class="latency">${fmt(t.inter_token_latency_ms, 2)} ms</dd>
    <dt>Tokens per step</dt><dd class="per-step">${fmt(t.generated_tokens_per_step, 2)}</dd>
    <dt>Accepted drafts in output</dt><dd class="accepted-share">${fmt(t.accepted_token_share, 1)} %</dd>
    <dt>Generated tokens</dt><dd>${esc(t.generated_tokens)} in ${fmt(t.seconds, 1)} s</dd></dl>`;
}

// The 95 % intervals of a result by position, for the error bars.
const positionIntervals = (result) => (result.confidence && result.confidence.per_position_acceptance_rates) || {};

// --- over time: uPlot --------------------------------------------------------------------
// The charts of the page shown, by target, so a live refresh appends to them (and tests read
// what they drew).
const charts = new Map();
window.specdecCharts = charts;

const usable = (points) => points.filter((p) => p.acceptance_rate !== null && p.acceptance_rate !== undefined);
const columns = (points) => [
  points.map((p) => Date.parse(p.taken_at) / 1000),
  points.map((p) => p.acceptance_rate),
  points.map((p) => p.acceptance_length),
];

function timeChart(box, target, points, open) {
  const good = usable(points);
  box.dataset.points = good.length;
  const data = columns(good);
  const axis = { stroke: css("--muted"), grid: { stroke: css("--line"), width: 1 }, ticks: { stroke: css("--line"), width: 1 } };
  const width = Math.max(box.clientWidth - 8, 240);
  const options = {
    width, height: 230,
    cursor: { drag: { x: true, y: false } },
    scales: { x: { time: true }, rate: { range: [0, 100] }, length: { range: (u, min, max) => [1, Math.max(Math.ceil(max ?? 2), 2)] } },
    series: [
      // The legend's time is UTC; the axis is in the viewer's zone (uPlot's default).
      { label: "UTC", value: (u, seconds) => (seconds == null ? "–" : utcText(seconds * 1000)) },
      { label: "Acceptance rate", scale: "rate", stroke: color(0), width: 2, points: { show: good.length < 60 }, value: (u, v) => (v == null ? "–" : `${fmt(v, 2)} %`) },
      { label: "Acceptance length", scale: "length", stroke: color(1), width: 2, points: { show: good.length < 60 }, value: (u, v) => (v == null ? "–" : `${fmt(v, 2)} tokens/step`) },
    ],
    axes: [
      { ...axis, label: `time (${ZONE})`, labelSize: 18 },
      { ...axis, scale: "rate", label: "acceptance rate (%)", labelSize: 18, values: (u, ticks) => ticks.map((t) => `${t}`) },
      { ...axis, scale: "length", side: 1, label: "length (tokens/step)", labelSize: 18, grid: { show: false } },
    ],
  };
  const plot = new uPlot(options, data, box);
  const empty = document.createElement("p");
  empty.className = "muted empty";
  box.appendChild(empty);
  const entry = { plot, points: [...points], open, box, empty };
  charts.set(target, entry);
  sayIfEmpty(entry);
  return entry;
}

function sayIfEmpty(entry) {
  const count = usable(entry.points).length;
  entry.empty.hidden = count > 0;
  entry.empty.textContent = entry.open ? "No sampled interval with drafts yet: it fills as the samples come in." : "No sampled interval had drafts.";
}

function appendPoints(target, newer) {
  const entry = charts.get(target);
  if (!entry || newer.length === 0) return;
  entry.points.push(...newer);
  const good = usable(entry.points);
  entry.box.dataset.points = good.length;
  entry.plot.setData(columns(good));
  sayIfEmpty(entry);
}

window.addEventListener("resize", () => {
  for (const entry of charts.values()) entry.plot.setSize({ width: Math.max(entry.box.clientWidth - 8, 240), height: 230 });
});

// --- pages ---------------------------------------------------------------------------------
async function windowsPage(params, stale) {
  const query = new URLSearchParams(params);
  const page = await api(`/windows?${query}`);
  if (stale()) return;
  const value = (name) => esc(params.get(name) || "");
  const filtered = [...params.keys()].some((name) => name !== "cursor");
  const empty = filtered
    ? `<p class="hint" id="empty">No window matches these filters.</p>`
    : `<p class="hint" id="empty">No windows yet. Start one around a benchmark: <code>specdec run --target HOST:PORT -- your-benchmark</code>, or <code>POST /windows/ID/start</code> (see <a href="../docs">the API</a>).</p>`;
  view.innerHTML = `
    <h1>Windows</h1>
    <form class="filters" id="filters">
      <label>State <select name="state"><option value="">any</option>
        <option ${params.get("state") === "open" ? "selected" : ""}>open</option>
        <option ${params.get("state") === "closed" ? "selected" : ""}>closed</option></select></label>
      <label>Label (key=value) <input name="label" value="${value("label")}"></label>
      <label>Target (host:port) <input name="target" value="${value("target")}"></label>
      <label>Min acceptance (%) <input name="min_acceptance_rate" type="number" step="any" value="${value("min_acceptance_rate")}"></label>
      <label>Max acceptance (%) <input name="max_acceptance_rate" type="number" step="any" value="${value("max_acceptance_rate")}"></label>
      <button type="submit">Filter</button>
      <button type="button" id="compare">Compare selected</button>
    </form>
    <p id="compare-hint" class="hint" hidden></p>
    ${page.windows.length === 0 ? empty : `
    <table id="windows"><thead><tr><th>Pick</th><th>Baseline</th><th>Window</th><th>State</th><th>Started</th><th>Labels</th><th>Results</th></tr></thead>
    <tbody>${page.windows.map((w) => `
      <tr data-id="${esc(w.id)}"><td><input type="checkbox" value="${esc(w.id)}" aria-label="select ${esc(w.id)}"></td>
        <td data-label="baseline"><input type="radio" name="baseline" value="${esc(w.id)}" aria-label="${esc(w.id)} as the baseline"></td>
        <td data-label="window"><a href="#/window/${encodeURIComponent(w.id)}">${esc(w.id)}</a></td><td data-label="state">${stateBadge(w.state)}</td>
        <td data-label="started">${when(w.started_at)}</td><td data-label="labels">${chips(w.labels)}</td>
        <td data-label="results">${w.targets.map((t) => `${esc(t.target)}: ${t.status === "ok" ? `<span class="ok">${fmt(t.acceptance_rate, 2)} %</span>` : t.status ? `<span class="na">${esc(t.status)}</span>` : `<span class="open">open</span>`}${engineTag(t)}`).join("<br>")}</td></tr>`).join("")}
    </tbody></table>`}
    ${page.next_cursor ? `<p><a id="next" href="#/?${new URLSearchParams({ ...Object.fromEntries(params), cursor: page.next_cursor })}">Next page</a></p>` : ""}`;
  document.getElementById("filters").onsubmit = (event) => {
    event.preventDefault();
    const form = new URLSearchParams();
    for (const [name, v] of new FormData(event.target)) if (v) form.set(name, v);
    location.hash = `#/?${form}`;
  };
  document.getElementById("compare").onclick = () => {
    const chosen = [...document.querySelectorAll("#windows input[type=checkbox]:checked")].map((box) => box.value);
    const baseline = document.querySelector("#windows input[name=baseline]:checked");
    const hint = document.getElementById("compare-hint");
    if (baseline && !chosen.includes(baseline.value)) chosen.unshift(baseline.value);
    if (chosen.length < 2) {
      hint.hidden = false;
      hint.textContent = "Pick at least two windows to compare (and, if you like, one of them as the baseline; otherwise the first picked is).";
      return;
    }
    // The baseline first: the API compares every other window with the first.
    const first = baseline ? baseline.value : chosen[0];
    const ordered = [first, ...chosen.filter((id) => id !== first)];
    location.hash = `#/compare/${ordered.map(encodeURIComponent).join(",")}`;
  };
}

let refresh = null;

function resultDetails(result) {
  if (!result) return "";
  const rows = [];
  if (result.engine) rows.push(`<dt>Engine</dt><dd class="engine">${esc(result.engine)}, ${result.exact ? "exact" : "approximate"}</dd>`);
  rows.push(`<dt>Samples</dt><dd class="samples">${esc(result.samples?.taken ?? 0)} taken, ${esc(result.samples?.failed ?? 0)} failed</dd>`);
  rows.push(`<dt>Restarts</dt><dd class="restarts">${esc(result.restarts ?? 0)}${result.series_resets ? ` (${esc(result.series_resets)} counter resets)` : ""}</dd>`);
  const overlaps = result.overlaps;
  if (overlaps) {
    const others = overlaps.windows.map((w) => `<a href="#/window/${encodeURIComponent(w.id)}">${esc(w.id)}</a> (${fmt(w.seconds, 0)} s)`);
    const more = overlaps.more_windows;  // absent from results stored before it was counted
    if (more?.windows) others.push(`${esc(more.windows)} more of this team (${fmt(more.seconds, 0)} s)`);
    if (overlaps.other_teams.windows) others.push(`${esc(overlaps.other_teams.windows)} of other teams (${fmt(overlaps.other_teams.seconds, 0)} s)`);
    rows.push(`<dt>Overlapping windows</dt><dd class="overlaps">${others.length ? others.join(", ") : "none"}</dd>`);
  }
  return `<dl class="kv details">${rows.join("")}</dl>`;
}

async function windowPage(id, stale) {
  const path = `/windows/${encodeURIComponent(id)}`;
  const [window_, samples] = await Promise.all([api(path), api(`${path}/samples`)]);
  if (stale()) return;
  const points = Object.fromEntries(samples.series.map((s) => [s.target, s.points]));
  const open = window_.state === "open";
  const sampled = window_.sample_interval_s !== null && window_.sample_interval_s !== undefined;
  charts.clear();
  view.innerHTML = `<h1>Window ${esc(window_.id)} ${stateBadge(window_.state)}</h1>
    <dl class="kv window"><dt>Started</dt><dd>${when(window_.started_at)} by ${esc(window_.started_by)}</dd>
    <dt>Stopped</dt><dd>${open ? `<span class="open">open — live, refreshed every ${LIVE_REFRESH_MS / 1000} s</span>` : `${when(window_.stopped_at)} by ${esc(window_.stopped_by)}`}</dd>
    <dt>Labels</dt><dd class="labels">${chips(window_.labels)}</dd>
    <dt>Sampled</dt><dd>${sampled ? `every ${esc(window_.sample_interval_s)} s` : "no (only its two ends)"}</dd></dl>
    <div class="downloads"><button data-download="json">Download JSON</button>${open ? "" : `<button data-download="csv">Results CSV</button>`}<button data-download="samples">Samples CSV</button></div>
    <div class="cards" id="cards"></div>`;
  const files = {
    json: [path, `${id}.json`, "application/json"],
    csv: [`${path}/report?format=csv`, `${id}-results.csv`, "text/csv"],
    samples: [`${path}/samples?format=csv`, `${id}-samples.csv`, "text/csv"],
  };
  for (const button of view.querySelectorAll("[data-download]")) button.onclick = () => download(...files[button.dataset.download]).catch((error) => alert(error.message));
  const cards = document.getElementById("cards");
  for (const target of window_.targets) {
    const card = document.createElement("section");
    card.className = "card";
    card.dataset.target = target.target;
    const result = target.result;
    const data = result && result.data;
    const notes = result && result.notes && result.notes.length ? `<ul class="notes">${result.notes.map((n) => `<li>${esc(n)}</li>`).join("")}</ul>` : "";
    const flags = result && result.flags && result.flags.length ? `<ul class="flags">${result.flags.map((f) => `<li data-kind="${esc(f.kind)}">${esc(f.reason)}</li>`).join("")}</ul>` : "";
    const interval = (figure, name, digits, unit) => {
      const found = result && result.confidence && result.confidence[figure];
      return found ? `<dt>${name}, 95 % interval</dt><dd class="interval" data-figure="${figure}">${fmt(found.low, digits)} to ${fmt(found.high, digits)}${unit}</dd>` : "";
    };
    const throughput = result ? throughputRows(result.throughput) : "";
    card.innerHTML = `<h3>${esc(target.target)}</h3>` + (data ? `
      <dl class="kv"><dt>Acceptance rate</dt><dd class="rate">${fmt(data.acceptance_rate, 2)} %</dd>
      ${interval("acceptance_rate", "Rate", 2, " %")}<dt>Acceptance length</dt><dd class="length">${fmt(data.acceptance_length, 2)}</dd>
      ${interval("acceptance_length", "Length", 3, "")}<dt>Drafts</dt><dd>${esc(data.num_drafts ?? "–")}</dd><dt>Draft tokens</dt><dd>${esc(data.draft_tokens ?? "–")}</dd>
      <dt>Accepted tokens</dt><dd>${esc(data.accepted_tokens ?? "–")}</dd></dl>${resultDetails(result)}${throughput}${flags}${notes}<h2>Per-position acceptance</h2>`
      : result ? `<p class="error">N/A: ${esc(result.error)}</p>${resultDetails(result)}${throughput}${notes}` : `<p class="muted">Open: the results come with the stop.</p>`);
    if (data) card.appendChild(positionChart([{ name: window_.id, rates: data.per_position_acceptance_rates, intervals: positionIntervals(result) }]));
    if (result && result.accepted_distribution) {
      const title = document.createElement("h2");
      title.textContent = "Tokens accepted per draft";
      card.appendChild(title);
      card.appendChild(distributionChart(result.accepted_distribution));
    }
    const heading = document.createElement("h2");
    heading.textContent = "Over time";
    card.appendChild(heading);
    const box = document.createElement("div");
    box.className = "timeline";
    card.appendChild(box);
    cards.appendChild(card);
    if (sampled) timeChart(box, target.target, points[target.target] || [], open);
    else {
      box.dataset.points = 0;
      box.innerHTML = `<p class="muted empty">Not sampled: a window started with <code>sample_interval_s</code> (<code>specdec run --sample-interval S</code>) is drawn over time.</p>`;
    }
  }
  if (open) refresh = setTimeout(() => liveRefresh(id, path), LIVE_REFRESH_MS);
}

// An open window: only the samples taken since the last one shown, appended to the charts;
// the whole page again only once the window has closed (its results came).
async function liveRefresh(id, path) {
  if (decodeURIComponent(location.hash) !== `#/window/${id}`) return;
  try {
    const last = [...charts.values()].flatMap((c) => c.points.map((p) => p.taken_at)).sort().pop();
    const query = last ? `?after=${encodeURIComponent(last)}` : "";
    const [newer, current] = await Promise.all([api(`${path}/samples${query}`), api(path)]);
    for (const series of newer.series) appendPoints(series.target, series.points);
    document.body.dataset.refreshed = String(Number(document.body.dataset.refreshed || 0) + 1);
    if (current.state !== "open") return route();
  } catch (error) {
    console.warn("live refresh failed", error);
  }
  refresh = setTimeout(() => liveRefresh(id, path), LIVE_REFRESH_MS);
}

function verdictText(v) {
  if (v.difference === null) return esc(v.reason);
  const change = `${v.difference >= 0 ? "+" : ""}${fmt(v.difference, 3)}`;
  if (v.verdict === null) return `${change}: ${esc(v.reason)}`;
  return `${change} (95 % interval ${fmt(v.low, 3)} to ${fmt(v.high, 3)}): <b>${esc(v.verdict)}</b>; the smallest this pair could detect: ${fmt(v.detectable, 3)}`;
}

function verdictList(d) {
  const figures = Object.entries(d.verdicts).map(([name, v]) => `<li data-figure="${esc(name)}">${esc(name.replace("_", " "))}: ${verdictText(v)}</li>`).join("");
  const mismatches = d.mismatches.map((m) => `<li class="mismatch">settings differ: ${esc(m)}</li>`).join("");
  return `<h2>${esc(d.window)} versus ${esc(d.versus)}</h2><ul class="verdicts">${figures}${mismatches}</ul>`;
}

async function comparePage(ids, stale) {
  const body = await api(`/compare?windows=${ids.map(encodeURIComponent).join(",")}`);
  if (stale()) return;
  const names = body.windows.map((w) => w.id);
  const swatch = (id) => `<span class="swatch" style="background:${color(names.indexOf(id))}"></span>`;
  view.innerHTML = `<h1>Compare ${names.map((id) => `${swatch(id)}${esc(id)}`).join(" · ")}</h1>
    <form class="filters"><label>Baseline <select id="baseline">${names.map((id) => `<option ${id === names[0] ? "selected" : ""}>${esc(id)}</option>`).join("")}</select></label></form>
    <p class="muted">Every other window is compared with the baseline, ${esc(names[0])}.</p>
    <div class="cards wide" id="cards"></div>`;
  document.getElementById("baseline").onchange = (event) => {
    const first = event.target.value;
    location.hash = `#/compare/${[first, ...names.filter((id) => id !== first)].map(encodeURIComponent).join(",")}`;
  };
  const cards = document.getElementById("cards");
  for (const row of body.targets) {
    const card = document.createElement("section");
    card.className = "card";
    card.dataset.target = row.target;
    const diff = (value, digits) => value === undefined ? "" : `<span class="${value >= 0 ? "diff-pos" : "diff-neg"}">${value >= 0 ? "+" : ""}${fmt(value, digits)}</span>`;
    const differences = Object.fromEntries(row.differences.map((d) => [d.window, d]));
    const speedups = (row.speedups || []).map((u) => `<li data-window="${esc(u.window)}">${esc(u.window)} versus ${esc(u.versus)} (without spec decoding): <b class="speedup">${fmt(u.generated_tokens_per_second, 2)}x</b> the generated tokens/s, ${fmt(u.inter_token_latency, 2)}x faster tokens, at acceptance length ${fmt(u.acceptance_length, 2)}</li>`).join("");
    const ok = row.results.filter((r) => r && r.status === "ok");
    card.innerHTML = `<h3>${esc(row.target)}</h3><table><thead><tr><th>Window</th><th>Acceptance (%)</th><th>Length</th><th>Drafts</th><th>Tokens/s</th></tr></thead><tbody>
      ${row.results.map((r, i) => r === null ? `<tr><td>${swatch(names[i])}${esc(names[i])}</td><td colspan="4" class="muted">not on this target</td></tr>` :
        `<tr data-window="${esc(r.window)}"><td>${swatch(r.window)}${esc(r.window)}${r.window === names[0] ? ' <span class="muted">(baseline)</span>' : ""}${engineTag(r)}</td><td>${fmt(r.acceptance_rate, 2)} ${diff(differences[r.window]?.acceptance_rate, 2)}</td>
         <td>${fmt(r.acceptance_length, 2)} ${diff(differences[r.window]?.acceptance_length, 3)}</td><td>${esc(r.num_drafts ?? r.status)}</td>
         <td class="tokens-per-second">${fmt(r.throughput?.generated_tokens_per_second, 2)}</td></tr>`).join("")}
      </tbody></table>${speedups ? `<h2>Speedup</h2><ul class="speedups">${speedups}</ul><p class="muted note">${esc(row.speedups[0].note)}</p>` : ""}${row.differences.map(verdictList).join("")}<h2>Per-position acceptance</h2>`;
    if (ok.length) {
      // Each window in its own colour, the same in every card: its place among the windows.
      const series = names.map((id) => ok.find((r) => r.window === id)).map((r, i) => r ? { name: r.window, rates: r.per_position_acceptance_rates, index: i } : null);
      const figure = positionChart(series.filter(Boolean));
      figure.querySelectorAll("rect.bar").forEach((bar) => bar.setAttribute("fill", color(names.indexOf(bar.dataset.series))));
      figure.querySelectorAll("ul.legend li").forEach((item) => item.querySelector(".swatch").style.background = color(names.indexOf(item.dataset.series)));
      card.appendChild(figure);
    } else {
      const none = document.createElement("p");
      none.className = "muted";
      none.textContent = "No window has a result on this target: nothing to draw.";
      card.appendChild(none);
    }
    cards.appendChild(card);
  }
}

// Each route's pages draw only while it is the latest: a slow answer for the page left
// behind never draws over the page asked for since.
let routing = 0;

async function route() {
  clearTimeout(refresh);
  const mine = ++routing;
  const stale = () => mine !== routing;
  // The route drawn, as it was asked for: the address may have moved on by the time it is
  // drawn (its hashchange not handled yet), and `ready` names what the page shows.
  const routed = location.hash || "#/";
  const hash = location.hash.slice(1) || "/";
  const [path, query] = hash.split("?");
  try {
    if (path.startsWith("/window/")) await windowPage(decodeURIComponent(path.slice(8)), stale);
    else if (path.startsWith("/compare/")) await comparePage(path.slice(9).split(",").map(decodeURIComponent), stale);
    else await windowsPage(new URLSearchParams(query || ""), stale);
    if (!stale()) document.body.dataset.ready = routed;
  } catch (error) {
    if (stale()) return;
    view.innerHTML = `<p class="error">${esc(error.message)}</p>`;
    document.body.dataset.ready = "error";
  }
}

window.addEventListener("hashchange", route);
route();
