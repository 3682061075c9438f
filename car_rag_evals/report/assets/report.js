// car-rag run report. Every string from the run is set with textContent (never innerHTML);
// per-query details are built only when a row is opened, and rows are drawn in pages.
"use strict";
(function () {
  const D = JSON.parse(document.getElementById("report-data").textContent);
  const PAGE = 200;
  const SVGNS = "http://www.w3.org/2000/svg";
  const bench = D.kind === "bench";

  function el(tag, attrs, ...kids) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "text") node.textContent = v; else node.setAttribute(k, v);
    }
    for (const kid of kids) if (kid != null) node.append(kid);
    return node;
  }
  function svg(tag, attrs, text) {
    const node = document.createElementNS(SVGNS, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    if (text != null) node.textContent = text;
    return node;
  }
  function table(head, rows, cls) {
    const t = el("table", { class: cls || "" });
    t.append(el("thead", {}, el("tr", {}, ...head.map((h) => el("th", { text: h })))));
    const body = el("tbody");
    for (const r of rows) body.append(el("tr", {}, ...r.map((c) => (c instanceof Node ? el("td", {}, c) : el("td", { text: String(c) })))));
    t.append(body);
    return t;
  }
  const short = (id) => (id.length > 28 ? id.slice(0, 12) + "…" + id.slice(-14) : id);

  // ---- per-query facts the filters read
  function shown(q, col) {
    if (bench) { const s = q.systems[col]; return s && s.top ? s.top : null; }
    const a = q.answers[col]; return a ? a.ctx : null;
  }
  function outcome(q, col) {
    if (bench) { const s = q.systems[col]; return s ? (s.tca ? "TCA hit" : "TCA miss") : null; }
    const a = q.answers[col]; return a ? String(a.label) : null;
  }
  function missing(q, col) {
    const ids = shown(q, col);
    return ids != null && !q.gold.some((g) => ids.includes(g));
  }
  function role(q, id) {
    if (q.gold.includes(id)) return "controlling";
    if (q.anchors.includes(id)) return "anchor";
    if (q.chain.nodes.some(([n]) => n === id)) return "in chain";
    return "other";
  }

  // ---- header, problems, overview
  const root = el("main");
  document.body.append(root);
  root.append(el("h1", { text: `car-rag report — ${D.suite || "unknown suite"} (${bench ? "bench" : "LLM reader"})` }));
  if (D.description) root.append(el("p", { text: D.description }));
  root.append(el("p", { class: "meta", text: `${D.command || "command not recorded"} · run ${D.generated || "?"} · report built ${D.built} from ${D.source}` }));
  if (D.problems.length) {
    const box = el("section", { class: "problems", id: "problems" }, el("h2", { text: "What is missing or was skipped" }));
    const ul = el("ul");
    for (const p of D.problems) ul.append(el("li", { text: p }));
    box.append(ul);
    root.append(box);
  }
  const ov = el("section", { id: "overview" }, el("h2", { text: "Overview" }));
  if (D.overview.rows.length) ov.append(table(D.overview.head, D.overview.rows, "overview"));
  else ov.append(el("p", { text: "No summary in this run." }));
  if (D.overview.note) ov.append(el("p", { class: "note", text: D.overview.note }));
  for (const [name, uri] of Object.entries(D.images)) ov.append(el("img", { src: uri, alt: `${name} plot`, class: "plot" }));
  root.append(ov);

  // ---- filters
  const cols = D.columns;
  const sec = el("section", { id: "queries" }, el("h2", { text: `Queries (${D.queries.length})` }));
  const colSel = el("select", { id: "f-column", "aria-label": bench ? "system" : "condition" }, el("option", { value: "", text: bench ? "any system" : "any condition" }));
  for (const c of cols) colSel.append(el("option", { value: c.name, text: c.label }));
  const labSel = el("select", { id: "f-label", "aria-label": "label" }, el("option", { value: "", text: "any label" }));
  for (const l of bench ? ["TCA miss", "TCA hit"] : D.labels) labSel.append(el("option", { value: l, text: l }));
  const hops = [...new Set(D.queries.map((q) => q.hop || "–"))].sort();
  const hopSel = el("select", { id: "f-hop", "aria-label": "hop type" }, el("option", { value: "", text: "any hop type" }));
  for (const h of hops) hopSel.append(el("option", { value: h, text: h }));
  const miss = el("input", { type: "checkbox", id: "f-missing" });
  const search = el("input", { type: "search", id: "f-search", placeholder: "search question, id, answer…" });
  const count = el("span", { id: "count", class: "count" });
  sec.append(el("div", { class: "filters" }, colSel, labSel, hopSel,
    el("label", {}, miss, document.createTextNode(" controlling record missing from the top k")), search, count));

  const head = ["query", "hop", "question", ...cols.map((c) => c.name)];
  const tbl = el("table", { class: "queries", id: "query-table" });
  tbl.append(el("thead", {}, el("tr", {}, ...head.map((h) => el("th", { text: h })))));
  const body = el("tbody");
  tbl.append(body);
  const more = el("button", { id: "more", type: "button" });
  sec.append(tbl, more);
  root.append(sec);
  if (!D.queries.length) sec.append(el("p", { text: "No per-query data (see above)." }));

  function matches(q) {
    if (hopSel.value && (q.hop || "–") !== hopSel.value) return false;
    const term = search.value.trim().toLowerCase();
    if (term) {
      const hay = [q.id, q.q, ...Object.values(q.answers).map((a) => a.answer)].join("\n").toLowerCase();
      if (!hay.includes(term)) return false;
    }
    if (!labSel.value && !miss.checked) return true;
    const which = colSel.value ? [colSel.value] : cols.map((c) => c.name);
    return which.some((c) => (!labSel.value || outcome(q, c) === labSel.value) && (!miss.checked || missing(q, c)));
  }

  let visible = [];
  let drawn = 0;
  function cell(q, c) {
    const o = outcome(q, c);
    if (o == null) return el("td", { text: "–" });
    const td = el("td", { class: "lab lab-" + o.replace(/[^a-z]+/gi, "-").toLowerCase(), text: bench ? (q.systems[c].tca ? "✓" : "✗") + (q.systems[c].rank ? " " + q.systems[c].rank : "") : o });
    if (missing(q, c)) td.classList.add("miss");
    return td;
  }
  function drawMore() {
    const frag = document.createDocumentFragment();
    for (const q of visible.slice(drawn, drawn + PAGE)) {
      const tr = el("tr", { class: "row", "data-id": q.id, tabindex: "0" },
        el("td", { class: "qid", text: q.id }), el("td", { text: q.hop || "–" }),
        el("td", { class: "question", text: q.q.length > 140 ? q.q.slice(0, 140) + "…" : q.q }),
        ...cols.map((c) => cell(q, c.name)));
      tr.addEventListener("click", () => toggle(tr, q));
      tr.addEventListener("keydown", (e) => { if (e.key === "Enter") toggle(tr, q); });
      frag.append(tr);
    }
    body.append(frag);
    drawn = Math.min(visible.length, drawn + PAGE);
    more.hidden = drawn >= visible.length;
    more.textContent = `show ${Math.min(PAGE, visible.length - drawn)} more of ${visible.length - drawn}`;
  }
  function refresh() {
    visible = D.queries.filter(matches);
    body.textContent = "";
    drawn = 0;
    count.textContent = `${visible.length} of ${D.queries.length} queries`;
    drawMore();
  }
  more.addEventListener("click", drawMore);
  for (const f of [colSel, labSel, hopSel, miss]) f.addEventListener("change", refresh);
  search.addEventListener("input", refresh);

  // ---- drill-down, built on first open
  function toggle(tr, q) {
    const next = tr.nextElementSibling;
    if (next && next.classList.contains("detail")) { next.remove(); return; }
    const td = el("td", { colspan: String(head.length) }, detail(q));
    tr.after(el("tr", { class: "detail" }, td));
  }
  function recordLine(q, id, rank) {
    const r = D.records[id];
    const status = r ? r.status : "not in store";
    const d = el("details", { class: "rec " + status },
      el("summary", {},
        el("span", { class: "rank", text: rank != null ? `#${rank}` : "" }),
        el("code", { text: id }), el("span", { class: "type", text: r ? r.type : "?" }),
        el("span", { class: "status", text: status }), el("span", { class: "role role-" + role(q, id).replace(" ", "-"), text: role(q, id) }),
        el("span", { class: "date", text: r && r.date ? r.date : "" })));
    d.addEventListener("toggle", () => { if (d.open && d.childNodes.length === 1) d.append(el("pre", { text: r ? r.text : "" })); });
    return d;
  }
  function chainSvg(q) {
    const nodes = q.chain.nodes;
    if (!nodes.length) return el("p", { text: "No chain recorded for this query." });
    const W = 190, H = 46, GX = 170, GY = 18;
    const byLayer = new Map();
    for (const [id, layer] of nodes) { if (!byLayer.has(layer)) byLayer.set(layer, []); byLayer.get(layer).push(id); }
    const pos = new Map();
    let rows = 0;
    for (const [layer, ids] of byLayer) { ids.forEach((id, i) => pos.set(id, [layer * (W + GX) + 10, i * (H + GY) + 10])); rows = Math.max(rows, ids.length); }
    const width = Math.max(...byLayer.keys()) * (W + GX) + W + 20, height = rows * (H + GY) + 10;
    const s = svg("svg", { class: "chain", width, height, viewBox: `0 0 ${width} ${height}`, role: "img" });
    s.append(svg("title", {}, `Authority chain of ${q.id}: ${nodes.length} records, frontier ${q.chain.frontier.join(", ")}`));
    const defs = svg("defs");
    const marker = svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto" });
    marker.append(svg("path", { d: "M0,0 L10,5 L0,10 z" }));
    defs.append(marker);
    s.append(defs);
    for (const [sup, target, rule] of q.chain.edges) {
      const [x1, y1] = pos.get(target), [x2, y2] = pos.get(sup);
      s.append(svg("line", { class: "edge", x1: x1 + W, y1: y1 + H / 2, x2, y2: y2 + H / 2, "marker-end": "url(#arrow)" }));
      s.append(svg("text", { class: "rule", x: (x1 + W + x2) / 2, y: (y1 + y2) / 2 + H / 2 - 4, "text-anchor": "middle" }, rule));
    }
    for (const [id] of nodes) {
      const [x, y] = pos.get(id);
      const r = D.records[id];
      const cls = ["node", q.chain.frontier.includes(id) ? "frontier" : "voided", q.gold.includes(id) ? "gold" : "", q.anchors.includes(id) ? "anchor" : ""].join(" ");
      const g = svg("g", { class: cls });
      g.append(svg("title", {}, `${id} (${r ? r.type : "?"}, ${q.chain.frontier.includes(id) ? "active frontier" : "voided"})`));
      g.append(svg("rect", { x, y, width: W, height: H, rx: 6 }));
      g.append(svg("text", { x: x + 8, y: y + 18 }, r ? r.type : "?"));
      g.append(svg("text", { x: x + 8, y: y + 36, class: "id" }, short(id)));
      s.append(g);
    }
    return s;
  }
  function detail(q) {
    const box = el("div", { class: "drill", "data-id": q.id });
    box.append(el("h3", { text: q.id }), el("p", { class: "question-full", text: q.q }));
    if (q.gold_answer) box.append(el("p", {}, el("b", { text: "Gold answer: " }), document.createTextNode(q.gold_answer)));
    box.append(el("h4", { text: "Authority chain (→ points to the record that supersedes; bold: controlling; green: active frontier)" }), chainSvg(q));
    for (const [id] of q.chain.nodes) box.append(recordLine(q, id, null));
    for (const c of cols) {
      if (bench) {
        const s = q.systems[c.name];
        if (!s) continue;
        const sec = el("div", { class: "system", "data-col": c.name }, el("h4", { text: `${c.label}: ${s.tca ? "TCA ✓" : "TCA ✗"}, controlling record at rank ${s.rank ?? "> depth"}` }));
        if (s.ignored && s.ignored.length) sec.append(el("p", { class: "warn", text: "superseded in the chain, superseder missing: " + s.ignored.join(", ") }));
        (s.top || []).forEach((id, i) => sec.append(recordLine(q, id, i + 1)));
        box.append(sec);
      } else {
        const a = q.answers[c.name];
        if (!a) continue;
        const sec = el("div", { class: "system answer", "data-col": c.name }, el("h4", {}, document.createTextNode(c.name + ": "), el("span", { class: "lab lab-" + String(a.label).replace(/[^a-z]+/gi, "-"), text: String(a.label) })));
        if (a.reason) sec.append(el("p", { class: "reason", text: "why: " + a.reason }));
        sec.append(el("pre", { class: "llm-answer", text: a.answer }));
        if (a.guard) {
          const g = a.guard;
          sec.append(el("p", { class: g.flagged ? "warn" : "", text: `guard: ${g.flagged ? "flagged" : "not flagged"}${g.reason ? " — " + g.reason : ""}${g.findings && g.findings.length ? "; findings: " + g.findings.map((f) => (typeof f === "string" ? f : JSON.stringify(f))).join("; ") : ""}` }));
        }
        sec.append(el("p", { text: `context (${a.ctx.length} records):` }));
        a.ctx.forEach((id, i) => sec.append(recordLine(q, id, i + 1)));
        if (q.evidence[c.name]) sec.append(el("details", { class: "evidence" }, el("summary", { text: "what the reader was given" }), el("pre", { text: q.evidence[c.name] })));
        box.append(sec);
      }
    }
    for (const [form, title] of [["reader", "car-rag evidence, reader form"], ["audit", "car-rag evidence, audit form (XML)"]]) {
      if (q.evidence[form]) box.append(el("details", { class: "evidence" }, el("summary", { text: title }), el("pre", { class: "ev-" + form, text: q.evidence[form] })));
    }
    return box;
  }
  refresh();
})();
