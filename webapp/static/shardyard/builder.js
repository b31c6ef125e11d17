// Mixture builder: edits a table of components and stages; on every change (debounced)
// posts the draft to the prediction endpoint, which runs shardcore.mixture.plan_epochs,
// and shows predicted tokens/epochs per pool, warnings and charts. Save posts the same
// draft; the server validates again and creates the version.
"use strict";
(function () {
  const root = document.getElementById("builder");
  if (!root) return;
  const csrf = root.querySelector("input[name=csrfmiddlewaretoken]").value;
  const poolOptions = document.getElementById("pool-options").innerHTML;
  const rows = document.getElementById("rows");
  const stages = document.getElementById("stages");
  const esc = (s) => { const d = document.createElement("span"); d.textContent = String(s); return d.innerHTML; };
  const fmt = (n) => Number(n).toLocaleString();

  function addRow(values) {
    const v = values || {};
    const tr = rows.insertRow();
    tr.innerHTML =
      '<td><input data-k="stage" value="' + esc(v.stage || "main") + '" size="8"></td>' +
      '<td><input data-k="group" value="' + esc(v.group || "") + '" size="10"></td>' +
      '<td><input data-k="group_weight" type="number" step="any" min="0" value="' + esc(v.group_weight || "") + '" style="width:6rem"></td>' +
      '<td><select data-k="pool">' + poolOptions + "</select></td>" +
      '<td><input data-k="weight" type="number" step="any" min="0" value="' + esc(v.weight || 1) + '" style="width:6rem"></td>' +
      '<td><button type="button" class="small danger" data-remove>×</button></td>';
    if (v.pool) tr.querySelector("select").value = v.pool;
  }
  function addStage(values) {
    const v = values || {};
    const tr = stages.insertRow();
    tr.innerHTML = '<td><input data-k="name" value="' + esc(v.name || "anneal") + '" size="10"></td>' +
      '<td><input data-k="tokens" type="number" min="1" value="' + esc(v.tokens || 100000000) + '"></td>' +
      '<td><button type="button" class="small danger" data-remove>×</button></td>';
  }
  function collect(table) {
    return Array.from(table.rows).slice(1).map((tr) => {
      const o = {};
      tr.querySelectorAll("[data-k]").forEach((el) => { o[el.dataset.k] = el.value; });
      return o;
    });
  }
  function draft() {
    const get = (n) => root.querySelector("[name=" + n + "]").value;
    return {
      name: get("name"), description: get("description"), tokens: get("tokens"), seed: get("seed"),
      order: get("order"), max_repetitions: get("max_repetitions"),
      rows: collect(rows), stages: collect(stages),
    };
  }
  function post(url, body) {
    return fetch(url, {
      method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrf },
      body: JSON.stringify(body),
    }).then((r) => r.json());
  }
  function show(p) {
    document.getElementById("error").textContent = p.error || "";
    document.getElementById("warnings").innerHTML = (p.warnings || []).map((w) => "<li>" + esc(w) + "</li>").join("");
    const table = document.getElementById("prediction");
    table.innerHTML = p.rows ? "<tr><th>Pool</th><th>Samples</th><th>Tokens</th><th>Epochs</th><th>Share</th></tr>" +
      p.rows.map((r) => "<tr><td>" + esc(r.pool) + "</td><td>" + fmt(r.samples) + "</td><td>" + fmt(r.tokens) +
        "</td><td>" + r.epochs.toFixed(2) + "</td><td>" + (100 * r.share).toFixed(1) + "%</td></tr>").join("") : "";
    if (p.epochs_figure) window.shardyardCharts.draw(document.getElementById("epochs-chart"), p.epochs_figure);
    if (p.composition_figure) window.shardyardCharts.draw(document.getElementById("composition-chart"), p.composition_figure);
    // A draft that cannot be planned shows no numbers: stale charts would contradict it.
    ["epochs-chart", "composition-chart"].forEach((id) => {
      const el = document.getElementById(id);
      if (p.error && el.classList.contains("js-plotly-plot") && window.Plotly) window.Plotly.purge(el);
    });
    const blocked = p.error || p.save_error;
    document.getElementById("save").disabled = Boolean(blocked);
    document.getElementById("save-reason").textContent = blocked ? "Cannot save: " + blocked : "";
  }
  // Until the budget is typed, it follows the first pool's size: one epoch of it.
  const budget = root.querySelector("[name=tokens]");
  budget.addEventListener("input", () => { budget.dataset.typed = "1"; });
  function defaultBudget() {
    if (budget.dataset.typed) return;
    const first = rows.querySelector("[data-k=pool]");
    const opt = first && first.selectedOptions[0];
    if (opt && opt.dataset.tokens) budget.value = opt.dataset.tokens;
  }
  rows.addEventListener("change", (e) => { if (e.target.dataset.k === "pool") defaultBudget(); });
  // Requests are numbered: a response older than the latest request of its kind is
  // dropped, so a slow prediction never paints over a newer one.
  let timer = null, seq = 0, saveSeq = 0;
  function refresh() {
    clearTimeout(timer);
    timer = setTimeout(() => {
      const mine = ++seq;
      post(root.dataset.predictUrl, draft()).then((p) => { if (mine === seq) show(p); })
        .catch(() => { if (mine === seq) show({ error: "prediction failed; retrying on the next change" }); });
    }, 250);
  }
  // A refused Save keeps its reason beside the button (predictions never touch it) until
  // the user edits the field it names (any field when it names none) or saves again.
  const saveError = document.getElementById("save-error");
  function showSaveError(message) {
    // "mixture name: ...", "tokens: ...", "rows[2].weight: ...": the field it is about.
    const m = /^(?:[a-z]+ )?([a-z_]+)(?:\[\d+\])?(?:\.[a-z_]+)?:/.exec(message);
    saveError.dataset.field = m && root.querySelector("[name=" + m[1] + "]") ? m[1] : "";
    saveError.textContent = "Not saved: " + message;
  }
  function editedSaveError(e) {
    if (!saveError.textContent) return;
    const field = saveError.dataset.field;
    if (!field || (e.target.name || e.target.dataset.k) === field) saveError.textContent = "";
  }
  root.addEventListener("input", (e) => { editedSaveError(e); refresh(); });
  root.addEventListener("change", refresh);
  root.addEventListener("click", (e) => {
    const t = e.target;
    if (t.dataset.add === "row") addRow();
    else if (t.dataset.add === "stage") addStage();
    else if (t.hasAttribute("data-remove")) t.closest("tr").remove();
    else return;
    refresh();
  });
  document.getElementById("save").addEventListener("click", () => {
    const mine = ++saveSeq;
    saveError.textContent = "";
    post(root.dataset.saveUrl, draft()).then((r) => {
      if (mine !== saveSeq) return;
      if (r.url) window.location = r.url;
      else showSaveError(r.error || "could not save");
    }).catch(() => { if (mine === saveSeq) showSaveError("the server did not answer; try again"); });
  });
  // A draft given by the page (a run's proposal): its settings, stages and rows.
  function fill(d) {
    ["name", "description", "tokens", "seed", "order", "max_repetitions"].forEach((k) => {
      if (d[k] !== undefined && d[k] !== null) root.querySelector("[name=" + k + "]").value = d[k];
    });
    budget.dataset.typed = "1";
    (d.stages || []).forEach(addStage);
    (d.rows || []).forEach(addRow);
  }
  const given = document.getElementById("builder-draft");
  if (given) fill(JSON.parse(given.textContent));
  else if (poolOptions.trim()) { addRow(); defaultBudget(); }
  refresh();
})();
