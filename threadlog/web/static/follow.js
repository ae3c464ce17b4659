// The one connection to the server that the viewer's pages in a browser share (a SharedWorker,
// started by `viewer.js`). A browser opens six connections to a server at most: with a live
// stream per page, a seventh visible page did not even load. This worker holds one stream,
// `/live/log`, which says when the log moved, and tells every page that follows it; each page
// then fetches its own rows, a request that ends at once.
//
// A page posts `{follow: true}` when shown and `{follow: false}` when hidden or left; the stream
// is open while at least one page follows. The worker posts its whole state on every change:
// `{connected, position}` (the log's last position, null until known), with `failed` when the
// server could not read the log (the pages stop; the stream opens again for the next to follow),
// and `unavailable` (what the server said) while it cannot open the database: the stream stays
// open and says when the file opens again, and the pages go on. The browser keeps the worker
// while any page uses it, so closing the page that started it changes nothing for the others.
"use strict";

importScripts("/static/stream.js");  // lastingStream

const following = new Set();
let source = null;
let state = {connected: false, position: null};

const tell = (port) => port.postMessage(state);
const update = (change) => {
  state = {...state, ...change};
  following.forEach(tell);
};

function open() {
  source = lastingStream(() => "/live/log", (stream) => {
    // A stream opened again starts over: it says `unavailable` again at once if the file still is.
    stream.addEventListener("open", () => update({connected: true, unavailable: null}));
    stream.addEventListener("unavailable", (message) => update({unavailable: JSON.parse(message.data).error}));
    stream.addEventListener("available", () => update({unavailable: null}));
    stream.addEventListener("error", () => update({connected: false}));
    stream.addEventListener("moved", (message) => update({position: JSON.parse(message.data).position}));
    stream.addEventListener("failed", (message) => {  // the server could not read the log: say so, stop
      update({connected: false, failed: JSON.parse(message.data).error});
      close();
      following.clear();
    });
  });
}

function close() {
  if (source) source.close();
  source = null;
  state = {connected: false, position: null};
}

self.addEventListener("connect", (event) => {
  const port = event.ports[0];
  port.addEventListener("message", (message) => {
    if (message.data.follow) {
      following.add(port);
      if (!source) open();
      tell(port);
    } else {
      following.delete(port);
      if (following.size === 0) close();
    }
  });
  port.start();
});
