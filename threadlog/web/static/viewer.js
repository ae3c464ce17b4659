// Progressive enhancement for the threadlog viewer: every page works without this file.
// - replay: moving the slider shows the thread at that offset (the form submits itself);
// - live: an open thread page shows events as they are committed (server-sent events), or,
//   after a batch too big to add, or once it took a page's worth of rows (`data-rows`, or
//   `data-room` characters of HTML) while open, a link to the latest page; it then adds no
//   rows but still replaces those it holds, so a redaction erases its text there too (and drops
//   the rows of an erased message its update no longer holds, `erased`). A browser
//   gives a server six connections at most, and a stream per page held them all with six pages
//   open: a seventh did not even load. The pages of a browser share one stream that says when
//   the log moved (`follow.js`, a SharedWorker), and each fetches its own update then; where
//   shared workers are missing, each page holds its own stream. A page the browser hides (a
//   tab in the background) stops following, and catches up from its last update when shown.
//   Either stream opens again after an answer that is not one (`stream.js`, loaded first).
//   The server's page says nothing of it (a browser running no script shows no page as live).
//   A page says `· live` only once its stream is open: until then (a stream the server refuses,
//   past the streams it serves at once, is asked for again) it says `· connecting…`.
//   A database the server cannot open now (a 503: removed, or replaced by no database for a
//   while) is no refusal: the page says so and asks again, less often the longer it lasts, and
//   goes on once the file is back, where a refusal (a 4xx) stops it.
// Items arrive as HTML the server rendered and sanitised; they are parsed in a <template>,
// where nothing runs, and the page's Content-Security-Policy forbids inline script anyway.
"use strict";

// An update the server could not give: asked again after RETRY_FIRST ms, then twice as long
// after each failure, up to RETRY_MOST. A 503 (UNAVAILABLE) with the server's reason is the
// database it cannot open now, said as such.
const RETRY_FIRST = 1000;
const RETRY_MOST = 10000;
const UNAVAILABLE = 503;

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
  const address = new URL(list.dataset.live, window.location.href);
  // A page left open on a busy thread grew without bound: it takes one page's worth of new rows.
  const rows = Number(list.dataset.rows) || Infinity;
  const room = Number(list.dataset.room) || Infinity;
  let added = 0;
  let taken = 0;
  let stale = false;  // it offers the latest page: updates only replace rows it holds
  let stopped = false;  // the server said it cannot read the log: not followed again
  let reached = address.searchParams.get("after") || "0";  // the position the page's last update reached
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
  // The rows of an event a redaction erased (`update.erased`, offsets) that the update does not
  // send again: a redacted message keeps one block, and the page kept its other blocks' text and
  // the card of an answer cut short or refused, which a page loaded now does not show.
  const dropErased = (update) => {
    if (!Array.isArray(update.erased)) return;
    const erased = new Set(update.erased.map(String));
    const sent = new Set(update.items.map((entry) => entry.id));
    list.querySelectorAll(":scope > li.item").forEach((el) => {
      if (erased.has(el.dataset.offset) && /^(r|more)-/.test(el.id) && !sent.has(el.id)) el.remove();
    });
  };
  // The card of a paused answer the model went on from (`update.resumed`, row ids): the new
  // message took it away, and a page loaded now does not show it.
  const dropResumed = (update) => {
    if (!Array.isArray(update.resumed)) return;
    update.resumed.forEach((id) => { const el = document.getElementById(String(id)); if (el) el.remove(); });
  };
  const take = (update) => {
    dropErased(update);
    dropResumed(update);
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
  const connected = (yes) => {
    if (yes) {
      list.dataset.connected = "1";
      say("· live");
    } else if (list.dataset.connected) {
      delete list.dataset.connected;
      say("· reconnecting…");
    }
  };
  const unavailable = () => {  // the server cannot open the database now: said until an update comes
    delete list.dataset.connected;
    say("· database unavailable, retrying…");
  };
  let follower = null;
  const fail = (error) => {  // the server could not read the log: say so, stop
    follower.stop();
    stopped = true;
    if (state) state.textContent = `· live updates stopped: ${error}`;
  };

  // Each way of following has start() (the page is shown) and stop() (hidden, or left).
  // Its own stream: `/live` sends the page's updates, from the last one the page took.
  const ownStream = () => {
    let source = null;
    const asked = () => {
      const from = new URL(address);
      from.searchParams.set("after", reached);
      return from;
    };
    return {
      start() {
        if (source) return;
        source = lastingStream(asked, (stream) => {
          stream.addEventListener("open", () => connected(true));
          stream.addEventListener("error", () => connected(false));
          stream.addEventListener("failed", (message) => fail(JSON.parse(message.data).error));
          stream.addEventListener("unavailable", unavailable);
          stream.addEventListener("available", () => connected(true));
          stream.addEventListener("rows", (message) => {
            reached = message.lastEventId;
            take(JSON.parse(message.data));
          });
        });
      },
      stop() {
        if (source) source.close();
        source = null;
        delete list.dataset.connected;
      },
    };
  };
  // The stream the browser's pages share: told the log is elsewhere than `reached`, the page
  // fetches its update (`/live/rows`) until it is there, one request at a time. (Behind it, the
  // database was replaced by one with a shorter log: the server says so, and the page stops.)
  const sharedLog = () => {
    const worker = new SharedWorker("/static/follow.js");
    let moved = -1;  // the log's last position, as the worker last told
    let linked = false;  // whether the worker's stream is connected, as it last told
    let fetching = false;
    let retry = null;
    let waited = 0;  // how long the last retry waited (ms): doubled after each failure, 0 once an update came
    const retryLater = () => {
      waited = Math.min(waited * 2 || RETRY_FIRST, RETRY_MOST);
      retry = setTimeout(catchUp, waited);
    };
    const catchUp = async () => {
      if (fetching) return;
      fetching = true;
      clearTimeout(retry);
      try {
        while (Number(reached) !== moved && !stopped && !document.hidden) {
          const asked = new URL(address);
          asked.pathname = "/live/rows";
          asked.searchParams.set("after", reached);
          const response = await fetch(asked, {headers: {accept: "application/json"}});
          if (response.status >= 400 && response.status < 500) {  // refused (the thread is gone? an event unreadable?): asking again won't help
            const refused = await response.json().catch(() => ({}));  // a 404 is the HTML error page
            return fail(refused.error || `the server refused this page's update (HTTP ${response.status}); reload the page`);
          }
          const update = await response.json();  // a server's error page is not JSON: tried again below
          if (response.status === UNAVAILABLE && update.error) {  // the database cannot be opened now
            unavailable();
            return retryLater();
          }
          if (update.error) return fail(update.error);
          if (!response.ok) throw new Error(`${response.status}`);
          waited = 0;
          connected(linked);  // an update that failed said `reconnecting…`: this one came
          if (update.items) take(update);
          if (Number(update.position) <= Number(reached)) break;  // none readable past it yet: told again when there are
          reached = String(update.position);
        }
      } catch (error) {
        connected(false);
        retryLater();
      } finally {
        fetching = false;
      }
    };
    worker.port.addEventListener("message", (message) => {
      if (stopped || document.hidden) return;
      if (message.data.failed) return fail(message.data.failed);
      linked = message.data.connected && !message.data.unavailable;
      if (message.data.unavailable) unavailable();
      else connected(linked);
      if (message.data.position !== null) {
        moved = message.data.position;
        catchUp();
      }
    });
    worker.port.start();
    worker.addEventListener("error", () => {  // the worker did not start: the page follows on its own
      follower = ownStream();
      follow();
    });
    return {
      start: () => worker.port.postMessage({follow: true}),
      stop() {
        worker.port.postMessage({follow: false});
        delete list.dataset.connected;
      },
    };
  };

  const follow = () => {
    if (stopped) return;
    if (document.hidden) {
      follower.stop();
      say("· paused while hidden");
    } else {
      if (!list.dataset.connected) say("· connecting…");  // `· live` once its stream is taken: the server may refuse it (past its limit of streams)
      follower.start();
    }
  };
  follower = window.SharedWorker ? sharedLog() : ownStream();
  document.addEventListener("visibilitychange", follow);
  window.addEventListener("pagehide", () => follower.stop());  // the shared stream closes with the last page
  follow();
}

document.addEventListener("DOMContentLoaded", () => {
  replaySlider();
  liveRows();
});
