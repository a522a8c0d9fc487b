// Forge console live updates: the gateway's server-sent events (the same job feed the
// API's watch endpoints serve) drive every change; nothing polls. Loaded by every page;
// it acts on the elements that ask for it:
//   table[data-live]   a jobs list: rows change state, new jobs appear on top;
//   [data-refresh]     a server-rendered part re-read when the feed reports a change
//                      (the job page's summary and timeline, the capacity table, a
//                      playground's summary);
//   pre[data-follow]   a live log: streamed until the job ends, then the archived rest;
//   time[data-rel]     a relative time ("3 min ago"), re-worded as time passes (the
//                      exact UTC time stays in its title).
(function () {
  "use strict";
  var TERMINAL = ["succeeded", "failed", "cancelled", "timedOut", "rejected"];

  function setState(el, state) {
    if (!el) return;
    el.textContent = state;
    el.className = "state state-" + state;
    el.setAttribute("data-state", state);
  }

  function relative(ms, now) {
    var delta = now - ms, secs = Math.floor(Math.abs(delta) / 1000), span;
    if (secs < 10) return "just now";
    if (secs < 60) span = secs + " s";
    else if (secs < 3600) span = Math.floor(secs / 60) + " min";
    else if (secs < 48 * 3600) span = Math.floor(secs / 3600) + " h";
    else span = Math.floor(secs / 86400) + " days";
    return delta >= 0 ? span + " ago" : "in " + span;
  }

  function reword() {
    var now = Date.now();
    document.querySelectorAll("time[data-rel]").forEach(function (t) {
      var ms = Date.parse(t.getAttribute("datetime"));
      if (!isNaN(ms)) t.textContent = relative(ms, now);
    });
  }

  function liveList(table) {
    var body = table.tBodies[0];
    var only = table.getAttribute("data-filter");
    var source = new EventSource(table.getAttribute("data-live"));
    var reading = {};
    // Re-reads the job's row as the server draws it (its standing and its life), one
    // read per job at a time; a change during a read reads it once more.
    function reread(id, insert) {
      if (reading[id]) { reading[id] = "again"; return; }
      reading[id] = "busy";
      fetch("/console/jobs/" + encodeURIComponent(id) + "?part=row", { credentials: "same-origin" })
        .then(function (r) { return r.ok && !r.redirected ? r.text() : null; })
        .then(function (html) {
          if (html === null) return;
          var holder = document.createElement("tbody");
          holder.innerHTML = html;
          var fresh = holder.firstElementChild;
          if (!fresh) return;
          var row = document.getElementById("job-" + id);
          if (row) {
            row.replaceWith(fresh);
          } else if (insert) {
            body.insertBefore(fresh, body.firstChild);
            var none = document.getElementById("no-jobs");
            if (none) none.remove();
          }
        })
        .finally(function () {
          var again = reading[id] === "again";
          delete reading[id];
          if (again) reread(id, insert);
        });
    }
    source.addEventListener("state", function (ev) {
      var e = JSON.parse(ev.data);
      var row = document.getElementById("job-" + e.jobId);
      if (row || reading[e.jobId]) {
        // Shown, or on its way: read (again) once the read in flight is back.
        if (row) setState(row.querySelector(".state"), e.to);
        reread(e.jobId, !row);
        return;
      }
      if (e.from || (only && only !== e.to)) return;
      reread(e.jobId, true);
    });
    source.addEventListener("standing", function (ev) {
      var e = JSON.parse(ev.data);
      var row = document.getElementById("job-" + e.jobId);
      if (reading[e.jobId]) reading[e.jobId] = "again";
      var cell = row && row.querySelector(".standing");
      var series = e.queue.series === "unplaced" ? "no series chosen yet" : e.queue.series;
      if (cell) cell.textContent = "#" + e.queue.position + " on " + series + ": " + e.queue.reason.replace(/\x60/g, "");
    });
    source.addEventListener("resync", function () { window.location.reload(); });
  }

  function refresher(el) {
    var busy = false, again = false;
    function run() {
      if (busy) { again = true; return; }
      busy = true;
      fetch(el.getAttribute("data-refresh"), { credentials: "same-origin" })
        // A session that ended is redirected to the login page: not a part to show.
        .then(function (r) { return r.ok && !r.redirected ? r.text() : null; })
        .then(function (html) { if (html !== null) el.innerHTML = html; })
        .finally(function () { busy = false; if (again) { again = false; run(); } });
    }
    return run;
  }

  function liveParts(parts) {
    var byFeed = {};
    parts.forEach(function (el) {
      var feed = el.getAttribute("data-feed");
      (byFeed[feed] = byFeed[feed] || []).push(refresher(el));
    });
    Object.keys(byFeed).forEach(function (feed) {
      var source = new EventSource(feed);
      var all = function (ev) {
        byFeed[feed].forEach(function (run) { run(); });
        if (ev.type !== "state") return;
        var e = JSON.parse(ev.data);
        // One job's feed ends with the job; a playground's says when it is over.
        if (e.terminal || (TERMINAL.indexOf(e.to) >= 0 && feed.indexOf("/console/live/jobs/") === 0))
          source.close();
      };
      ["state", "standing", "pending", "resync"].forEach(function (t) { source.addEventListener(t, all); });
    });
  }

  function follow(pre) {
    var status = document.getElementById(pre.getAttribute("data-status"));
    var decoder = new TextDecoder();
    fetch(pre.getAttribute("data-follow"), { credentials: "same-origin" }).then(function (r) {
      if (!r.ok || !r.body) return;
      var reader = r.body.getReader();
      function pump() {
        return reader.read().then(function (chunk) {
          if (chunk.done) {
            if (status) status.textContent = "The job ended: this is its archived log.";
            return;
          }
          pre.appendChild(document.createTextNode(decoder.decode(chunk.value, { stream: true })));
          // Keep the page light on huge logs: drop the oldest chunks past ~2 MB.
          while (pre.textContent.length > 2000000 && pre.firstChild) pre.removeChild(pre.firstChild);
          pre.scrollTop = pre.scrollHeight;
          return pump();
        });
      }
      return pump();
    });
  }

  function start() {
    document.querySelectorAll("table[data-live]").forEach(liveList);
    liveParts(Array.prototype.slice.call(document.querySelectorAll("[data-refresh]")));
    document.querySelectorAll("pre[data-follow]").forEach(follow);
    document.querySelectorAll("pre.log").forEach(function (pre) { pre.scrollTop = pre.scrollHeight; });
    window.setInterval(reword, 30000);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
