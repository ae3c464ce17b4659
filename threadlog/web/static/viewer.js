// Progressive enhancement for the threadlog viewer: every page works without this file.
// - replay: moving the slider shows the thread at that offset (the form submits itself);
// - live: an open thread page shows events as they are committed (server-sent events), or,
//   after a batch too big to add, or once it took a page's worth of rows (`data-rows`, or
//   `data-room` characters of HTML) while open, a link to the latest page; it then adds no
//   rows but still replaces those it holds, so a redaction erases its text there too. A page
//   the browser hides (a tab in the background) closes its stream and opens it again, from
//   the last update it got, when shown: a browser gives a server six connections at most, and
//   six open thread pages held them all, so a seventh tab did not even load.
// Items arrive as HTML the server rendered and sanitised; they are parsed in a <template>,
// where nothing runs, and the page's Content-Security-Policy forbids inline script anyway.
"use strict";

function replaySlider() {
  const slider = document.getElementById("at-slider");
  if (!slider) return;
  const output = document.getElementById("at-value");
  slider.addEventListener("input", () => { if (output) output.textContent = slider.value; });
  slider.addEventListener("change", () => slider.form.submit());
}

// An item the page does not have yet goes where the page would show it: after the item the
// update lists before it (a fork card made at an earlier offset went to the end of the list),
// or, when it comes first, before the first item of a later offset (and that item's anchor).
function upsert(list, entry, previous) {
  const holder = document.createElement("template");
  holder.innerHTML = entry.html.trim();
  const fresh = holder.content.firstElementChild;
  if (!fresh) return previous;
  const old = document.getElementById(entry.id);
  if (old) {
    const open = old.querySelectorAll("details[open]").length > 0;
    old.replaceWith(fresh);
    if (open) fresh.querySelectorAll("details").forEach((d) => { d.open = true; });
  } else if (previous && previous.parentNode === list) {
    previous.after(fresh);
  } else {
    const offset = Number(fresh.dataset.offset);
    const later = Array.from(list.querySelectorAll(":scope > li.item")).find((el) => Number(el.dataset.offset) > offset);
    const before = later && later.previousElementSibling && later.previousElementSibling.classList.contains("anchor")
      ? later.previousElementSibling : later;
    list.insertBefore(fresh, before || null);
  }
  return fresh;
}

function liveRows() {
  const list = document.getElementById("rows");
  if (!list || !list.dataset.live || !window.EventSource) return;
  const state = document.getElementById("live-state");
  // A page left open on a busy thread grew without bound: it takes one page's worth of new rows.
  const rows = Number(list.dataset.rows) || Infinity;
  const room = Number(list.dataset.room) || Infinity;
  let added = 0;
  let taken = 0;
  let stale = false;  // it offers the latest page: the stream only replaces rows it holds
  let source = null;
  let stopped = false;  // the server said it cannot read the thread: not opened again
  let reached = "";  // the position the last update reached (its `id:`): where a stream opened again goes on
  const say = (text) => { if (state && !stale) state.textContent = text; };
  const offerLatest = (href, head) => {
    stale = true;
    if (state) {
      const more = document.createElement("a");
      more.id = "live-reload";
      more.href = href;
      more.textContent = `${head} events now: show the latest`;
      state.replaceChildren("· ", more);
    }
  };
  const take = (update) => {
    const fresh = update.items.filter((entry) => !document.getElementById(entry.id));
    added += fresh.length;
    taken += fresh.reduce((sum, entry) => sum + entry.html.length, 0);
    // Too many new events to add here (`reload`), or the page took its share: the rest is on the
    // latest page. The rows it holds are replaced all the same (an erased one, a status changed).
    if (stale || update.reload || added > rows || taken > room) {
      update.items.filter((entry) => document.getElementById(entry.id)).forEach((entry) => upsert(list, entry, null));
      if (!stale) offerLatest(update.reload || list.dataset.latest, update.head);
      return;
    }
    let previous = null;
    update.items.forEach((entry) => { previous = upsert(list, entry, previous); });
    for (const id of ["range-stop", "range-end"]) {
      const el = document.getElementById(id);
      if (el) el.textContent = String(update.head);
    }
    const empty = document.getElementById("no-rows");
    if (empty) empty.remove();
  };
  const open = () => {
    const address = new URL(list.dataset.live, window.location.href);
    if (reached) address.searchParams.set("after", reached);
    source = new EventSource(address);
    source.addEventListener("open", () => {
      list.dataset.connected = "1";
      say("· live");
    });
    source.addEventListener("error", () => say("· reconnecting…"));
    source.addEventListener("failed", (message) => {  // the server could not read the thread: say so, stop
      close();
      stopped = true;
      if (state) state.textContent = `· live updates stopped: ${JSON.parse(message.data).error}`;
    });
    source.addEventListener("rows", (message) => {
      reached = message.lastEventId;
      take(JSON.parse(message.data));
    });
  };
  const close = () => {
    if (source) source.close();
    source = null;
    delete list.dataset.connected;
  };
  const follow = () => {
    if (document.hidden) {
      close();
      if (!stopped) say("· paused while hidden");
    } else if (!source && !stopped) {
      open();
    }
  };
  document.addEventListener("visibilitychange", follow);
  follow();
}

document.addEventListener("DOMContentLoaded", () => {
  replaySlider();
  liveRows();
});
