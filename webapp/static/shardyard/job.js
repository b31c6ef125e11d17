// Live job page: polls the job's JSON every 2 s while it is queued or running and
// updates the fields in place; stops once the job reaches a terminal state, swapping in
// what its end changed (the answer's outcome_html: failed units, bad input, the unit
// timeline; a page that shows what the job builds, data-reload-when-done, then reloads to
// show it).
"use strict";
(function () {
  const root = document.getElementById("job");
  if (!root) return;
  const url = root.dataset.progressUrl;
  const field = (name) => root.ownerDocument.querySelector('[data-field="' + name + '"]');
  const fmt = (n) => (n === null || n === undefined ? "–" : Number(n).toLocaleString());
  function set(name, text) { const el = field(name); if (el) el.textContent = text; }
  function esc(s) { const d = document.createElement("span"); d.textContent = s; return d.innerHTML; }

  function render(p) {
    const state = field("state");
    if (state) { state.textContent = p.state; state.className = "badge " + p.state; }
    const bar = field("bar");
    if (bar) bar.style.width = Math.round(100 * p.progress) + "%";
    set("units_done", fmt(p.units_done)); set("units_total", fmt(p.units_total));
    ["documents", "tokens", "bytes", "bad_lines"].forEach((k) => set(k, fmt(p[k])));
    set("throughput", p.tokens_per_second ? fmt(Math.round(p.tokens_per_second)) + " tokens/s" : "–");
    set("eta", p.eta_seconds === null ? "–" : fmt(Math.round(p.eta_seconds)) + " s");
    set("error", p.error || "");
    set("log_tail", p.log_tail || "");
    const counts = field("unit_counts");
    if (counts) counts.innerHTML = Object.entries(p.unit_counts).map(([s, n]) =>
      '<tr><td><span class="badge ' + esc(s) + '">' + esc(s) + "</span></td><td>" + fmt(n) + "</td></tr>").join("");
    const units = field("units");
    if (units) units.innerHTML = "<tr><th>Unit</th><th>Phase</th><th>State</th><th>Attempts</th><th>Worker</th><th>Heartbeat</th><th>Last event</th></tr>" +
      p.units.map((u) => "<tr><td><code>" + esc(u.unit_id) + "</code></td><td>" + u.phase +
        '</td><td><span class="badge ' + esc(u.state) + '">' + esc(u.state) + "</span></td><td>" +
        u.attempts + "</td><td>" + esc(u.worker) + "</td><td>" +
        (u.heartbeat_age === null ? "" : u.heartbeat_age + " s ago") + "</td><td>" +
        esc(u.last_event || "") + "</td></tr>").join("");
    // Only what applies is shown: Cancel while the job runs, Retry once it ended without
    // succeeding (a succeeded job has nothing to retry or cancel).
    document.querySelectorAll("button[data-when=active]").forEach((b) => { b.hidden = !p.is_active; });
    document.querySelectorAll("button[data-when=retryable]").forEach((b) => {
      b.hidden = p.is_active || p.state === "succeeded";
    });
    // The parts a job's end changes (failed units, bad input, the unit timeline), as the
    // server renders them once it has ended.
    const outcome = document.getElementById("job-outcome");
    if (outcome && typeof p.outcome_html === "string") {
      outcome.innerHTML = p.outcome_html;
      if (window.shardyardCharts) window.shardyardCharts.drawAll(outcome);
    }
    return p.is_active;
  }

  function poll() {
    fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then((r) => (r.ok ? r.json() : Promise.reject(r.status)))
      .then((p) => {
        if (render(p)) setTimeout(poll, 2000);
        // A page about what the job builds shows it once the job ends.
        else if (root.dataset.reloadWhenDone) window.location.reload();
      })
      .catch(() => setTimeout(poll, 10000));
  }
  if (root.dataset.active === "1") setTimeout(poll, 2000);
  else fetch(url).then((r) => r.json()).then(render).catch(() => {});
})();
