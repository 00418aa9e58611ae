// specdec-collector dashboard: plain JavaScript, no external assets (it runs without internet).
"use strict";

const KEY = "specdec-api-key";
const view = document.getElementById("view");

// --- API access: the key is asked once and kept for the browser session ------------------
function askKey() {
  return new Promise((resolve) => {
    const dialog = document.getElementById("key-dialog");
    const form = document.getElementById("key-form");
    form.onsubmit = () => {
      sessionStorage.setItem(KEY, document.getElementById("key-input").value.trim());
      resolve();
    };
    dialog.showModal();
  });
}

async function api(path, options = {}) {
  for (let attempt = 0; attempt < 3; attempt++) {
    const headers = { Accept: "application/json", ...(options.headers || {}) };
    const key = sessionStorage.getItem(KEY);
    if (key) headers.Authorization = `Bearer ${key}`;
    const response = await fetch(path, { ...options, headers });
    if (response.status === 401) { sessionStorage.removeItem(KEY); await askKey(); continue; }
    if (!response.ok) {
      let detail = response.statusText;
      try { detail = (await response.json()).detail; } catch (_) { /* not JSON */ }
      throw new Error(typeof detail === "string" ? detail : JSON.stringify(detail));
    }
    document.getElementById("forget-key").hidden = !sessionStorage.getItem(KEY);
    return response.json();
  }
  throw new Error("no valid API key");
}

document.getElementById("forget-key").onclick = () => { sessionStorage.removeItem(KEY); location.reload(); };

// --- small helpers -------------------------------------------------------------------------
const esc = (text) => String(text ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
const fmt = (value, digits) => (value === null || value === undefined ? "–" : Number(value).toFixed(digits));
// Another engine than vLLM, or a figure that is not exact, is said beside the figures.
const engineTag = (r) => (r.engine && (r.engine !== "vllm" || r.exact === false) ? ` <span class="engine-tag">${esc(r.engine)}${r.exact === false ? ", approximate" : ""}</span>` : "");
const when = (iso) => (iso ? iso.replace("T", " ").slice(0, 19) : "–");
const svgNS = "http://www.w3.org/2000/svg";

function svg(width, height, cls) {
  const node = document.createElementNS(svgNS, "svg");
  node.setAttribute("viewBox", `0 0 ${width} ${height}`);
  node.setAttribute("class", `chart ${cls}`);
  return node;
}

function add(parent, tag, attrs, text) {
  const node = document.createElementNS(svgNS, tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, value);
  if (text !== undefined) node.textContent = text;
  parent.appendChild(node);
  return node;
}

// Bars per position; `series` is a list of {name, rates: {"0": 0.9, ...}}.
function positionChart(series) {
  const positions = [...new Set(series.flatMap((s) => Object.keys(s.rates || {})))].sort((a, b) => a - b);
  const width = 360, height = 180, left = 30, bottom = 20, top = 10;
  const chart = svg(width, height, "positions");
  chart.dataset.positions = positions.length;
  const slot = (width - left - 10) / Math.max(positions.length, 1);
  const barWidth = (slot * 0.8) / Math.max(series.length, 1);
  add(chart, "text", { x: 2, y: top + 8 }, "1.0");
  add(chart, "text", { x: 2, y: height - bottom }, "0");
  positions.forEach((position, i) => {
    series.forEach((s, j) => {
      const rate = (s.rates || {})[position];
      if (rate === undefined || rate === null) return;
      const barHeight = rate * (height - top - bottom);
      const bar = add(chart, "rect", {
        class: `bar b${j}`, x: left + i * slot + j * barWidth, y: height - bottom - barHeight,
        width: barWidth - 1, height: barHeight,
      });
      bar.dataset.position = position;
      bar.dataset.rate = rate;
      add(bar, "title", {}, `${s.name} position ${position}: ${rate}`);
      // Its 95 % interval, where the window was sampled enough: an error bar over the bar.
      const interval = (s.intervals || {})[position];
      if (!interval) return;
      const scale = (r) => height - bottom - Math.min(Math.max(r, 0), 1) * (height - top - bottom);
      const middle = left + i * slot + j * barWidth + (barWidth - 1) / 2;
      const whisker = add(chart, "path", {
        class: "interval",
        d: `M${middle - 3},${scale(interval.high)}h6M${middle},${scale(interval.high)}V${scale(interval.low)}M${middle - 3},${scale(interval.low)}h6`,
      });
      whisker.dataset.position = position;
      whisker.dataset.low = interval.low;
      whisker.dataset.high = interval.high;
      add(whisker, "title", {}, `${s.name} position ${position}: 95 % interval ${interval.low} to ${interval.high}`);
    });
    add(chart, "text", { x: left + i * slot + slot / 3, y: height - 5 }, position);
  });
  return chart;
}

// How many drafts had exactly n tokens accepted, n = 0..k: a histogram.
function distributionChart(distribution) {
  const counts = Object.entries(distribution).sort((a, b) => a[0] - b[0]);
  const width = 360, height = 150, left = 10, bottom = 20, top = 10;
  const chart = svg(width, height, "distribution");
  const most = Math.max(...counts.map(([, n]) => n), 1);
  const slot = (width - 2 * left) / Math.max(counts.length, 1);
  counts.forEach(([accepted, n], i) => {
    const barHeight = (n / most) * (height - top - bottom);
    const bar = add(chart, "rect", { class: "bar b0", x: left + i * slot, y: height - bottom - barHeight, width: slot * 0.8, height: barHeight });
    bar.dataset.accepted = accepted;
    bar.dataset.count = n;
    add(bar, "title", {}, `${n} drafts with ${accepted} accepted`);
    add(chart, "text", { x: left + i * slot + slot * 0.3, y: height - 5 }, accepted);
  });
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

// Acceptance rate (%) and length over time, from the interval values of the samples.
function timeChart(points) {
  const good = points.filter((p) => p.acceptance_rate !== null);
  const width = 360, height = 180, pad = 24;
  const chart = svg(width, height, "timeline");
  chart.dataset.points = good.length;
  if (good.length === 0) {
    add(chart, "text", { x: pad, y: height / 2 }, "no intervals with drafts yet");
    return chart;
  }
  const times = good.map((p) => Date.parse(p.taken_at));
  const t0 = Math.min(...times), t1 = Math.max(...times) || t0 + 1;
  const maxLength = Math.max(...good.map((p) => p.acceptance_length), 1);
  const x = (t) => pad + ((t - t0) / Math.max(t1 - t0, 1)) * (width - 2 * pad);
  const yRate = (r) => height - pad - (r / 100) * (height - 2 * pad);
  const yLength = (l) => height - pad - (l / maxLength) * (height - 2 * pad);
  add(chart, "polyline", { class: "rate", points: good.map((p, i) => `${x(times[i])},${yRate(p.acceptance_rate)}`).join(" ") });
  add(chart, "polyline", { class: "length", points: good.map((p, i) => `${x(times[i])},${yLength(p.acceptance_length)}`).join(" ") });
  add(chart, "text", { x: pad, y: 12 }, "acceptance rate (%, blue) and length (orange) per interval");
  return chart;
}

// --- pages ---------------------------------------------------------------------------------
async function windowsPage(params) {
  const query = new URLSearchParams(params);
  const page = await api(`/windows?${query}`);
  const value = (name) => esc(params.get(name) || "");
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
    <table id="windows"><thead><tr><th></th><th>Window</th><th>State</th><th>Started</th><th>Labels</th><th>Targets</th></tr></thead>
    <tbody>${page.windows.map((w) => `
      <tr data-id="${esc(w.id)}"><td><input type="checkbox" value="${esc(w.id)}" aria-label="select ${esc(w.id)}"></td>
        <td><a href="#/window/${encodeURIComponent(w.id)}">${esc(w.id)}</a></td><td>${esc(w.state)}</td><td>${when(w.started_at)}</td>
        <td>${Object.entries(w.labels).map(([k, v]) => `${esc(k)}=${esc(v)}`).join(", ")}</td>
        <td>${w.targets.map((t) => `${esc(t.target)}: <span class="${t.status === "ok" ? "ok" : "na"}">${t.status === "ok" ? fmt(t.acceptance_rate, 2) + " %" : esc(t.status || "open")}</span>${engineTag(t)}`).join("<br>")}</td></tr>`).join("")}
    </tbody></table>
    ${page.next_cursor ? `<p><a id="next" href="#/?${new URLSearchParams({ ...Object.fromEntries(params), cursor: page.next_cursor })}">Next page</a></p>` : ""}`;
  document.getElementById("filters").onsubmit = (event) => {
    event.preventDefault();
    const form = new URLSearchParams();
    for (const [name, v] of new FormData(event.target)) if (v) form.set(name, v);
    location.hash = `#/?${form}`;
  };
  document.getElementById("compare").onclick = () => {
    const chosen = [...document.querySelectorAll("#windows input:checked")].map((box) => box.value);
    if (chosen.length >= 2) location.hash = `#/compare/${chosen.map(encodeURIComponent).join(",")}`;
  };
}

let refresh = null;

async function windowPage(id) {
  const window_ = await api(`/windows/${encodeURIComponent(id)}`);
  const samples = await api(`/windows/${encodeURIComponent(id)}/samples`);
  const points = Object.fromEntries(samples.series.map((s) => [s.target, s.points]));
  view.innerHTML = `<h1>Window ${esc(window_.id)} <span class="muted">(${esc(window_.state)})</span></h1>
    <p class="muted">started ${when(window_.started_at)}, stopped ${when(window_.stopped_at)}${window_.state === "open" ? " — live, refreshed every 2 s" : ""}</p>
    <div class="cards" id="cards"></div>`;
  const cards = document.getElementById("cards");
  for (const target of window_.targets) {
    const card = document.createElement("section");
    card.className = "card";
    card.dataset.target = target.target;
    const result = target.result;
    const data = result && result.data;
    const engine = result && result.engine ? `<dt>Engine</dt><dd class="engine">${esc(result.engine)}, ${result.exact ? "exact" : "approximate"}</dd>` : "";
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
      <dt>Accepted tokens</dt><dd>${esc(data.accepted_tokens ?? "–")}</dd>${engine}</dl>${throughput}${flags}${notes}<h2>Per-position acceptance</h2>`
      : result ? `<p class="error">N/A: ${esc(result.error)}</p><dl class="kv">${engine}</dl>${throughput}${notes}` : `<p class="muted">open: results come with the stop</p>`);
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
    card.appendChild(timeChart(points[target.target] || []));
    cards.appendChild(card);
  }
  if (window_.state === "open") refresh = setTimeout(route, 2000);
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

async function comparePage(ids) {
  const body = await api(`/compare?windows=${ids.map(encodeURIComponent).join(",")}`);
  view.innerHTML = `<h1>Compare ${body.windows.map((w) => esc(w.id)).join(" vs ")}</h1><div class="cards" id="cards"></div>`;
  const cards = document.getElementById("cards");
  for (const row of body.targets) {
    const card = document.createElement("section");
    card.className = "card";
    card.dataset.target = row.target;
    const diff = (value, digits) => value === undefined ? "" : `<span class="${value >= 0 ? "diff-pos" : "diff-neg"}">${value >= 0 ? "+" : ""}${fmt(value, digits)}</span>`;
    const differences = Object.fromEntries(row.differences.map((d) => [d.window, d]));
    const speedups = (row.speedups || []).map((u) => `<li data-window="${esc(u.window)}">${esc(u.window)} versus ${esc(u.versus)} (without spec decoding): <b class="speedup">${fmt(u.generated_tokens_per_second, 2)}x</b> the generated tokens/s, ${fmt(u.inter_token_latency, 2)}x faster tokens, at acceptance length ${fmt(u.acceptance_length, 2)}</li>`).join("");
    card.innerHTML = `<h3>${esc(row.target)}</h3><table><thead><tr><th>Window</th><th>Acceptance (%)</th><th>Length</th><th>Drafts</th><th>Tokens/s</th></tr></thead><tbody>
      ${row.results.map((r, i) => r === null ? `<tr><td>${esc(body.windows[i].id)}</td><td colspan="4" class="muted">not on this target</td></tr>` :
        `<tr><td>${esc(r.window)}${engineTag(r)}</td><td>${fmt(r.acceptance_rate, 2)} ${diff(differences[r.window]?.acceptance_rate, 2)}</td>
         <td>${fmt(r.acceptance_length, 2)} ${diff(differences[r.window]?.acceptance_length, 3)}</td><td>${esc(r.num_drafts ?? r.status)}</td>
         <td class="tokens-per-second">${fmt(r.throughput?.generated_tokens_per_second, 2)}</td></tr>`).join("")}
      </tbody></table>${speedups ? `<h2>Speedup</h2><ul class="speedups">${speedups}</ul><p class="muted note">${esc(row.speedups[0].note)}</p>` : ""}${row.differences.map(verdictList).join("")}<h2>Per-position acceptance</h2>`;
    card.appendChild(positionChart(row.results.filter((r) => r && r.status === "ok").map((r) => ({ name: r.window, rates: r.per_position_acceptance_rates }))));
    cards.appendChild(card);
  }
}

async function route() {
  clearTimeout(refresh);
  const hash = location.hash.slice(1) || "/";
  const [path, query] = hash.split("?");
  try {
    if (path.startsWith("/window/")) await windowPage(decodeURIComponent(path.slice(8)));
    else if (path.startsWith("/compare/")) await comparePage(path.slice(9).split(",").map(decodeURIComponent));
    else await windowsPage(new URLSearchParams(query || ""));
    document.body.dataset.ready = location.hash || "#/";
  } catch (error) {
    view.innerHTML = `<p class="error">${esc(error.message)}</p>`;
    document.body.dataset.ready = "error";
  }
}

window.addEventListener("hashchange", route);
route();
