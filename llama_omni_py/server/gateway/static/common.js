// What the pages share: the API key of the page's own URL (a gateway with keys: open a page as
// /?api_key=KEY; browsers cannot give a WebSocket a header), the links between the pages (they
// carry the key), a notice when the server runs a generated model set (random weights: the
// replies are gibberish by design), and what a socket that could not open most likely means.
"use strict";

const omniKey = new URLSearchParams(location.search).get("api_key");

function withKey(path) {
  return omniKey ? path + (path.includes("?") ? "&" : "?") + "api_key=" + encodeURIComponent(omniKey) : path;
}

function wsUrl(path) {
  return (location.protocol === "https:" ? "wss://" : "ws://") + location.host + withKey(path);
}

function showNotice(text) {
  const box = document.getElementById("notice");
  box.textContent = text;
  box.hidden = false;
}

// Why a socket closed: a refused handshake reads as 1006 in a browser, so ask over HTTP whether
// the server wants a key.
async function explainClose(code) {
  if (code === 1006) {
    try {
      const r = await fetch(withKey("/status"));
      if (r.status === 401) {
        return omniKey ? "the server refused this page's API key: open the page with ?api_key= a valid key"
                       : "this server needs an API key: open the page as " + location.pathname + "?api_key=KEY";
      }
    } catch (e) { /* the server is gone: say so below */ }
    return "could not connect to the server (code 1006)";
  }
  return "connection closed (code " + code + ")";
}

for (const a of document.querySelectorAll("nav a")) a.href = withKey(a.getAttribute("href"));
fetch("/health").then((r) => r.json()).then((h) => {
  if (h.random_weights) {
    showNotice("This server runs a generated model set with random weights: its replies are gibberish and " +
               "its speech is noise, by design. Start it with --model and a MiniCPM-o-4_5-gguf directory or " +
               "repository id (such as openbmb/MiniCPM-o-4_5-gguf) for real answers.");
  }
}).catch(() => {});
