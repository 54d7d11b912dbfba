// The web app's progressive enhancement: every page works without it (forms post and reload).
// With it: a notice of what a form did is read out first, "answer all" shows live progress, a
// question page follows its states, deleting asks first, an item's assign select lists every
// writer in place, and an error page's way back returns to the form with what was typed in it.
// Served from the package (no CDN); the pages' CSP allows only this origin's scripts.
"use strict";

function poll(url, every, onData) {
  let stopped = false;
  async function tick() {
    if (stopped) return;
    try {
      const response = await fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin" });
      if (response.ok && onData(await response.json()) === false) { stopped = true; return; }
    } catch (e) { /* a missed poll is retried */ }
    setTimeout(tick, every);
  }
  setTimeout(tick, every);
}

document.addEventListener("DOMContentLoaded", () => {
  // A notice the page opens with says what the form just sent did ("Approved 2 items."). A status
  // region present at load is not announced by screen readers (they read its changes), so the
  // notice takes the focus and is read first, as GOV.UK's notification banner does.
  const notice = document.querySelector(".notice[role=status]");
  if (notice) {
    notice.tabIndex = -1;
    notice.focus();
  }
  const box = document.getElementById("progress");
  if (box && Number(box.dataset.inFlight) > 0) {
    const bar = document.getElementById("answer-progress");
    const text = document.getElementById("progress-text");
    poll(`/rfps/${box.dataset.rfp}/progress`, 1000, (data) => {
      bar.max = Math.max(1, data.total_items);
      bar.value = data.total_items - data.in_flight;
      for (const el of document.querySelectorAll("[data-stat]")) {
        if (el.dataset.stat in data) el.textContent = data[el.dataset.stat];
      }
      document.getElementById("completion").value = data.overall_completion_percentage;
      const state = document.getElementById("rfp-state");
      state.textContent = data.state.replace(/_/g, " ");
      if (data.in_flight === 0) {
        text.textContent = "All items answered; loading the answers…";
        window.location.replace(window.location.pathname + window.location.search.replace(/[?&]answering=\d+/, ""));
        return false;
      }
      text.textContent = `${data.in_flight} item${data.in_flight === 1 ? "" : "s"} still being answered`;
    });
  }
  const question = document.getElementById("question-view");
  if (question && question.dataset.state !== "complete") {
    poll(`/ask/${question.dataset.question}/state`, 700, (data) => {
      document.getElementById("question-state").textContent = data.state.replace(/_/g, " ");
      if (data.state === "complete") { window.location.reload(); return false; }
    });
  }
  // An item's assign select holds a few options (nobody, its assignee, you, "someone else…");
  // opened or focused, it gets every writer from the page's one #assignable list instead.
  const assignable = document.getElementById("assignable");
  if (assignable) {
    const fill = (event) => {
      const select = event.target;
      if (!(select instanceof HTMLSelectElement) || !select.closest("form.assign") || select.dataset.filled) return;
      const current = select.value === "choose" ? "" : select.value;
      select.dataset.filled = "1";
      select.replaceChildren(select.options[0], ...assignable.content.cloneNode(true).children);
      select.value = current;
    };
    for (const type of ["pointerdown", "focusin"]) document.addEventListener(type, fill, true);
  }
  // An error page's way back to the form it came from: back in history, where the browser keeps
  // what was typed in the form (the link itself would load it afresh, empty).
  for (const link of document.querySelectorAll("a[data-back]")) {
    link.addEventListener("click", (event) => {
      if (window.history.length > 1 && document.referrer === link.href) {
        event.preventDefault();
        window.history.back();
      }
    });
  }
  for (const form of document.querySelectorAll("form[data-confirm]")) {
    form.addEventListener("submit", (event) => {
      if (!window.confirm(form.dataset.confirm)) event.preventDefault();
    });
  }
});
