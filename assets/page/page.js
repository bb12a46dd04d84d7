// specviz's race page: lanes of coloured tokens replayed on their compute-time clock, as the
// window replays traces. Plain JavaScript, no network: everything it needs is in this file and
// in the JSON block `specviz export` wrote.
"use strict";

// ---------------------------------------------------------------- data

const DATA = JSON.parse(document.getElementById("specviz-data").textContent);
const $ = (id) => document.getElementById(id);

// A step is due when the replay clock passes its lane's running compute time (prefill left
// out, as in the window): lanes race as their own compute time says.
const computeMs = (totals) => totals.compute_ms;

const LANES = DATA.lanes.map((lane, index) => ({
  ...lane,
  index,
  colour: `var(--lane${index % DATA.colours})`,
  due: lane.steps.map((s) => computeMs(s.totals)),
  shown: 0,       // steps drawn now
  spans: [],      // the spans of each drawn step, to take them away on a rewind
  view: null,     // the element holding the tokens
  figures: null,  // the element holding the figures line
}));
const last = (values) => values[values.length - 1];
// A batch's compute includes its other streams' guessing: its speedup's clock runs a little on.
const END_MS = Math.max(...LANES.map((l) =>
  Math.max(last(l.due), l.batch ? last(l.batch.ms) : 0)));
const BASE = DATA.baseline === null ? null : LANES[DATA.baseline];
// Lanes of batches of as many streams are compared as wholes: every stream's tokens over the
// batch's compute, as the window's header and speedup graph take a race at N streams.
const BATCHES = BASE !== null && BASE.batch !== null &&
  LANES.every((l) => l.batch && l.batch.n === BASE.batch.n);

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (key === "class") node.className = value;
    else if (key === "style") node.style.cssText = value;
    else if (key.startsWith("data-")) node.setAttribute(key, value);
    else node[key] = value;
  }
  node.append(...children);
  return node;
}

const fixed = (x, digits) => (x === undefined || x === null ? "—" : x.toFixed(digits));
const VISIBLE = { " ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍" };
const visible = (text) => (text ? text.replace(/[ \n\t\r]/g, (c) => VISIBLE[c]) : "∅");
// Where a copied token came from, as the window's words say it (span_text).
const spanText = (s) => (s.run !== undefined
  ? `remembered from an earlier run (${s.run}), its token ${s.tok_start}` +
    (s.excerpt ? `: ${s.excerpt}` : "")
  : `copied from tokens ${s.tok_start}–${s.tok_end}` + (s.chr_start === undefined
    ? " (earlier output)" : `, prompt characters ${s.chr_start}–${s.chr_end}`));

// ---------------------------------------------------------------- header and lanes

function buildHeader() {
  const targets = [...new Set(LANES.map((l) => `${l.target} (${l.backend}, ${l.device})`))];
  $("models").textContent = `target ${targets.join(" · ")} · ${LANES.length} lane` +
    (LANES.length === 1 ? "" : "s");
  $("prompt").textContent = DATA.prompt;
  $("prompt-box").querySelector("summary").textContent =
    `Prompt (${DATA.prompt.length} characters)`;
}

function laneTitle(lane) {
  return lane.title;  // the export's title: the oracle once, with its K or auto K
}

function legend(kinds) {
  return el("div", { class: "legend" }, ...kinds.map((kind) => {
    const name = DATA.labels[kind];
    return el("span", {}, el("span", { class: `swatch k-${kind}` }, "■"),
      kind === "rejected" ? el("s", {}, name) : name);
  }));
}

function buildLanes() {
  for (const lane of LANES) {
    lane.view = el("div", { class: "tokens", "data-lane": lane.index });
    lane.figures = el("p", { class: "figures" });
    const sub = [lane.draft && `draft ${lane.draft}`, `${lane.steps.length} steps recorded`];
    $("lanes").append(el("article", { class: "lane", style: `--lane:${lane.colour}` },
      el("h2", {}, laneTitle(lane)), el("p", { class: "sub" }, sub.filter(Boolean).join(" · ")),
      lane.figures, legend(lane.legend), lane.view));
    $("key").append(el("span", { style: `--lane:${lane.colour}` },
      `${lane === BASE ? "╌╌" : "━━"} ${laneTitle(lane)}`));
  }
}

// ---------------------------------------------------------------- tokens

function tokenSpan(lane, step, index, text, classes) {
  if (step % 2 === 1) classes.push("shade");
  return el("span", { class: `tok ${classes.join(" ")}`, "data-lane": lane.index,
    "data-step": step, "data-tok": index }, text);
}

// Accepted proposals are a prefix of the proposal, so proposal order is text order; a
// rejected newline never happened: it shows as a mark, not a line break.
function stepSpans(lane, i) {
  const step = lane.steps[i];
  const spans = step.proposed.map((p, j) => (p.accepted
    ? tokenSpan(lane, i, j, p.text, ["accepted", `src-${p.source}`, `k-${p.c}`])
    : tokenSpan(lane, i, j, p.text.replace(/\n/g, "↵"), ["rejected", `src-${p.source}`,
      "k-rejected"])));
  spans.push(tokenSpan(lane, i, step.proposed.length, step.target.text,
    ["target", `t-${step.target.kind}`, "k-target"]));
  return spans;
}

function showSteps(lane, n) {
  const follow = lane.view.scrollTop + lane.view.clientHeight >= lane.view.scrollHeight - 4;
  while (lane.shown > n) lane.spans[--lane.shown].forEach((s) => s.remove());
  if (lane.shown < n) {
    const added = document.createDocumentFragment();
    for (; lane.shown < n; lane.shown++) {
      lane.spans[lane.shown] = stepSpans(lane, lane.shown);
      added.append(...lane.spans[lane.shown]);
    }
    lane.view.append(added);
    if (follow) lane.view.scrollTop = lane.view.scrollHeight;
  }
}

// A lane of a batch of streams: its batch steps the clock has passed, and the batch's tokens
// a second so far (every stream's), as the window's lane total gives it beside the stream it
// follows, to the batch's end (its other streams go on after the shown one ends).
function batchShown(lane) {
  let n = 0;
  while (n < lane.batch.ms.length && lane.batch.ms[n] <= clock.ms) n++;
  return n;
}
const batchRate = (lane) => {
  const n = batchShown(lane);
  return n ? lane.batch.tokens[n - 1] / (lane.batch.ms[n - 1] / 1000) : null;
};
const ratio = (a, b) => (a && b ? a / b : null);

function figuresText(lane) {
  if (!lane.shown) return "waiting for its first step";
  const t = lane.steps[lane.shown - 1].totals;
  const rate = (totals) => totals.tokens / (computeMs(totals) / 1000);
  const parts = [`${t.tokens} tokens`, `${fixed(rate(t), 1)} tok/s`,
    `acceptance ${t.proposed ? `${Math.round((100 * t.accepted) / t.proposed)}%` : "-"}`,
    `${fixed(t.tokens / t.steps, 2)} tok/step`];
  if (lane.batch) {
    parts.unshift(`${lane.batch.n} streams: ${fixed(batchRate(lane), 1)} tok/s in all`);
    parts[1] = `this one ${parts[1]}`;
  }
  if (BASE && BASE.shown && lane !== BASE) {
    // Batches are compared as wholes, as the window's header compares them at N streams.
    parts.push(BATCHES
      ? `batch speedup ${fixed(ratio(batchRate(lane), batchRate(BASE)), 2)}×`
      : `speedup ${fixed(rate(t) / rate(BASE.steps[BASE.shown - 1].totals), 2)}×`);
  }
  if (lane.shown === lane.steps.length && lane.summary) parts.push(`ended: ${lane.summary.reason}`);
  return parts.join(" · ");
}

// ---------------------------------------------------------------- replay clock

const clock = { ms: 0, playing: false, speed: 1, last: 0 };

function setClock(ms) {
  clock.ms = Math.min(Math.max(ms, 0), END_MS);
  for (const lane of LANES) {
    let n = 0;
    while (n < lane.due.length && lane.due[n] <= clock.ms) n++;
    showSteps(lane, n);
  }
  for (const lane of LANES) lane.figures.textContent = figuresText(lane);  // speedups: all moved
  $("clock").value = clock.ms;
  $("clock-text").textContent =
    `${fixed(clock.ms / 1000, 3)} s of ${fixed(END_MS / 1000, 3)} s compute`;
  drawGraphs();
}

function frame(now) {
  if (!clock.playing) return;
  const ms = clock.ms + (now - clock.last) * clock.speed;
  clock.last = now;
  setClock(ms);
  if (clock.ms >= END_MS) pause();
  else requestAnimationFrame(frame);
}

function play() {
  if (clock.ms >= END_MS) setClock(0);
  clock.playing = true;
  clock.last = performance.now();
  $("play").textContent = "⏸ Pause";
  requestAnimationFrame(frame);
}

function pause() {
  clock.playing = false;
  $("play").textContent = "▶ Play";
}

// ---------------------------------------------------------------- graphs

const BOX = { w: 480, h: 240, left: 48, right: 12, top: 10, bottom: 34 };
const SVG_NS = document.getElementById("race-graph").namespaceURI;  // the page names no URL

function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
  if (text !== undefined) node.textContent = text;
  return node;
}

function niceStep(max) {
  const raw = max / 5, power = 10 ** Math.floor(Math.log10(raw));
  return power * ([1, 2, 2.5, 5, 10].find((m) => m * power >= raw));
}

// Axes over [0, xmax] x [0, ymax]; the functions that place a point inside them.
function axes(root, xmax, ymax, xlabel, ylabel) {
  const { w, h, left, right, top, bottom } = BOX;
  xmax = xmax > 0 ? xmax : 1;
  ymax = ymax > 0 ? ymax : 1;
  const x = (v) => left + (v / xmax) * (w - left - right);
  const y = (v) => h - bottom - (v / ymax) * (h - top - bottom);
  root.append(svg("line", { class: "axis", x1: left, y1: y(0), x2: w - right, y2: y(0) }),
    svg("line", { class: "axis", x1: left, y1: y(0), x2: left, y2: top }));
  for (const [max, along] of [[xmax, "x"], [ymax, "y"]]) {
    const step = niceStep(max);
    for (let v = 0; v <= max * 1.0001; v += step) {
      const label = String(+v.toFixed(6));
      root.append(along === "x"
        ? svg("text", { x: x(v), y: h - bottom + 14, "text-anchor": "middle" }, label)
        : svg("text", { x: left - 5, y: y(v) + 4, "text-anchor": "end" }, label));
    }
  }
  root.append(svg("text", { x: (left + w - right) / 2, y: h - 4, "text-anchor": "middle" },
    xlabel), svg("text", { x: 12, y: (top + h - bottom) / 2, "text-anchor": "middle",
    transform: `rotate(-90 12 ${(top + h - bottom) / 2})` }, ylabel));
  return { x, y };
}

function curve(root, place, lane, points) {
  if (points.length < 1) return;
  root.append(svg("polyline", { class: `curve${lane === BASE ? " baseline" : ""}`,
    style: `--lane:${lane.colour}`, "data-lane": lane.index,
    points: points.map(([a, b]) => `${place.x(a).toFixed(1)},${place.y(b).toFixed(1)}`).join(" ") }));
}

const racePoints = (lane, n) => [[0, 0], ...lane.steps.slice(0, n)
  .map((s, i) => [lane.due[i] / 1000, s.totals.tokens])];

const ratePoints = (lane, n) => (BATCHES
  ? [[0, 0], ...lane.batch.ms.slice(0, n).map((ms, i) => [ms / 1000, lane.batch.tokens[i]])]
  : racePoints(lane, n));

// The baseline's tokens/s at a compute time, interpolated between its steps and held at its
// ends, as the window's speedup graph takes it: a lane past the baseline's end meets its final
// rate.
const BASE_RATES = BASE === null ? [] : ratePoints(BASE, Infinity).slice(1)
  .filter(([t]) => t > 0).map(([t, n]) => [t, n / t]);

function baseRate(seconds) {
  const pts = BASE_RATES;
  if (!pts.length) return NaN;
  if (seconds <= pts[0][0]) return pts[0][1];
  for (let i = 1; i < pts.length; i++) {
    const [t0, r0] = pts[i - 1], [t1, r1] = pts[i];
    if (seconds <= t1) return r0 + ((r1 - r0) * (seconds - t0)) / (t1 - t0);
  }
  return pts[pts.length - 1][1];
}

const speedupPoints = (lane, n) => ratePoints(lane, n).slice(1).filter(([t]) => t > 0)
  .map(([t, tokens]) => [t, tokens / t / baseRate(t)]).filter(([, s]) => Number.isFinite(s));

// Axes span the whole race, so a curve grows into a fixed frame as the replay goes on.
const RACE_MAX = Math.max(...LANES.map((l) => l.steps[l.steps.length - 1].totals.tokens));
const SPEEDUP_MAX = BASE === null ? 1 : Math.max(1.5, ...LANES.filter((l) => l !== BASE)
  .flatMap((l) => speedupPoints(l, Infinity).map(([, s]) => s * 1.05)));

function drawGraphs() {
  const race = $("race-graph"), speedup = $("speedup-graph");
  race.replaceChildren();
  speedup.replaceChildren();
  const place = axes(race, END_MS / 1000, RACE_MAX, "compute time (s)", "tokens");
  for (const lane of LANES) curve(race, place, lane, racePoints(lane, lane.shown));
  const sp = axes(speedup, END_MS / 1000, SPEEDUP_MAX, "compute time (s)", "× plain");
  speedup.append(svg("line", { class: "unit", x1: sp.x(0), y1: sp.y(1), x2: sp.x(END_MS / 1000),
    y2: sp.y(1) }));
  for (const root of [race, speedup]) {
    const at = place.x(clock.ms / 1000);
    root.append(svg("line", { class: "now", x1: at, x2: at, y1: BOX.top, y2: BOX.h - BOX.bottom }));
  }
  if (BASE === null) {
    speedup.append(svg("text", { x: BOX.w / 2, y: BOX.h / 2, "text-anchor": "middle" },
      "no plain lane (oracle none) to compare with"));
    return;
  }
  for (const lane of LANES) {
    if (lane !== BASE) {
      curve(speedup, sp, lane, speedupPoints(lane, BATCHES ? batchShown(lane) : lane.shown));
    }
  }
}

// ---------------------------------------------------------------- inspector and hover

function tokenOf(target) {
  const span = target.closest && target.closest(".tok");
  if (!span) return null;
  const lane = LANES[+span.dataset.lane], step = lane.steps[+span.dataset.step];
  return { span, lane, step, index: +span.dataset.step, proposal: step.proposed[+span.dataset.tok] };
}

function inspect(hit) {
  const { lane, step, index } = hit;
  document.querySelectorAll(".tok.picked").forEach((s) => s.classList.remove("picked"));
  lane.spans[index].forEach((s) => s.classList.add("picked"));
  const t = step.timing, target = step.target;
  const rows = step.proposed.map((p, j) => [
    el("tr", {}, el("td", {}, `${j + 1}`), el("td", {}, el("code", {}, visible(p.text))),
      el("td", { class: `k-${p.accepted ? p.c : "rejected"}` }, p.accepted ? "accepted" : "rejected"),
      el("td", {}, fixed(p.p_draft, 3)), el("td", {}, fixed(p.p_target, 3))),
    el("tr", {}, el("td"), el("td", { class: "why", colSpan: 4 }, [p.source, DATA.words[p.w],
      p.span ? spanText(p.span) : "", p.detail || ""].filter(Boolean).join(" · ")))]);
  $("inspector").replaceChildren(
    el("h3", { style: `--lane:${lane.colour}` }, `${laneTitle(lane)} · step ${step.step}`),
    el("p", {}, `K ${step.k}${step.auto_k ? " (auto)" : ""} · ${step.proposed.length} proposed · ` +
      `${step.proposed.filter((p) => p.accepted).length} accepted` +
      (step.declined ? ` · nothing proposed: ${step.declined}` : "") + (step.lossy ? " · LOSSY" : "")),
    step.proposed.length ? el("table", {}, el("tr", {}, ...["#", "token", "verdict", "p_draft",
      "p_target"].map((h) => el("th", {}, h))), ...rows.flat()) : "",
    el("p", {}, "target token ", el("code", { class: "k-target" }, visible(target.text)),
      ` (${target.kind}, id ${target.id}) · p_target ${fixed(target.p_target, 3)} · ` +
      `logit margin ${fixed(target.margin, 3)}`),
    el("p", {}, `draft ${fixed(t.draft_ms, 2)} ms · verify ${fixed(t.verify_ms, 2)} ms · ` +
      `other ${fixed(t.other_ms, 2)} ms`),
    el("p", { class: "quiet" }, `after it: ${step.totals.tokens} tokens in ` +
      `${fixed(computeMs(step.totals), 1)} ms of compute`));
}

// A token copied from the prompt lights up its source there.
function highlightPrompt(at) {
  const text = DATA.prompt;
  if (!at) { $("prompt").textContent = text; return; }
  const mark = el("mark", {}, text.slice(at[0], at[1])), box = $("prompt");
  box.replaceChildren(text.slice(0, at[0]), mark, text.slice(at[1]));
  // Scroll the prompt box alone: scrolling the page would pull the lanes from under the mouse.
  box.scrollTop += mark.getBoundingClientRect().top - box.getBoundingClientRect().top -
    box.clientHeight / 2;
}

function hover(event) {
  const hit = tokenOf(event.target);
  document.querySelectorAll(".tok.hovered").forEach((s) => s.classList.remove("hovered"));
  highlightPrompt(hit && hit.proposal && hit.proposal.at);
  if (!hit) return;
  if (hit.proposal && hit.proposal.at) hit.span.classList.add("hovered");
  if (!hit.span.title) {
    const p = hit.proposal;
    hit.span.title = p ? `${p.source} proposal · ${p.accepted ? "accepted" : "rejected"} · ` +
      `p_target ${fixed(p.p_target, 3)}\n${DATA.words[p.w]}`
      : `target token (${hit.step.target.kind}) · p_target ${fixed(hit.step.target.p_target, 3)}`;
  }
}

// ---------------------------------------------------------------- theme and start

function setTheme(name) {
  document.documentElement.dataset.theme = name;
  $("theme").textContent = name === "dark" ? "☀ light theme" : "☾ dark theme";
}

function start() {
  buildHeader();
  buildLanes();
  $("clock").max = END_MS;
  $("play").addEventListener("click", () => (clock.playing ? pause() : play()));
  $("clock").addEventListener("input", (e) => { pause(); setClock(+e.target.value); });
  $("speed").addEventListener("change", (e) => { clock.speed = +e.target.value; });
  $("show-rejected").addEventListener("change", (e) =>
    document.body.classList.toggle("hide-rejected", !e.target.checked));
  $("theme").addEventListener("click", () =>
    setTheme(document.documentElement.dataset.theme === "dark" ? "light" : "dark"));
  $("lanes").addEventListener("mouseover", hover);
  $("lanes").addEventListener("mouseleave", () => highlightPrompt(null));
  $("lanes").addEventListener("click", (e) => {
    const hit = tokenOf(e.target);
    if (!hit) return;
    inspect(hit);
    history.replaceState(null, "", `#step=${hit.lane.index}.${hit.step.step}`);  // a link to it
  });
  setTheme(document.documentElement.dataset.theme);
  openHash(location.hash.slice(1));
}

// #end shows the finished race; #t=MS the race at that compute time (milliseconds);
// #step=L.S the race when lane L's step S arrived, that step open in the inspector (a link
// from a post or a paper to the step it discusses).
function openHash(hash) {
  const picked = /^step=(\d+)\.(\d+)$/.exec(hash);
  const lane = picked && LANES[+picked[1]];
  const index = lane ? lane.steps.findIndex((s) => s.step === +picked[2]) : -1;
  if (index >= 0) {
    setClock(lane.due[index]);
    const step = lane.steps[index];
    const copied = step.proposed.findIndex((p) => p.at);
    inspect({ lane, step, index, proposal: step.proposed[copied] });
    if (copied >= 0) highlightPrompt(step.proposed[copied].at);
    return;
  }
  setClock(hash === "end" ? END_MS : hash.startsWith("t=") ? +hash.slice(2) || 0 : 0);
}

start();
