// A server-sent event stream that opens again after the browser gave up on it: loaded by the
// viewer's pages (`viewer.js`) and by the worker their stream is shared in (`follow.js`).
// A browser opens a dropped stream again by itself, but not one answered by anything else (a
// proxy's 502 while the server restarts): that one is closed for good, and a page following it
// said `reconnecting…` forever.
"use strict";

// How long before a stream the browser gave up on is opened again: as long as a browser waits
// before it opens a dropped one again.
const REOPEN_AFTER = 3000;

// `address()` is asked each time the stream opens (a page's stream goes on from its last
// update), and `listen(source)` adds the listeners to each EventSource opened. The stream
// is open until `close()`.
function lastingStream(address, listen) {
  let source = null;
  let retry = null;
  const open = () => {
    const opened = new EventSource(address());
    source = opened;
    listen(opened);
    opened.addEventListener("error", () => {
      if (opened.readyState === EventSource.CLOSED && source === opened) retry = setTimeout(open, REOPEN_AFTER);
    });
  };
  open();
  return {
    close() {
      clearTimeout(retry);
      if (source) source.close();
      source = null;
    },
  };
}
