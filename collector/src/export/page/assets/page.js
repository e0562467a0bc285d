// commwatch live page: refreshes the view's <main> in place every data-refresh-ms milliseconds by fetching
// the same address with partial=1 (server-rendered, already escaped HTML from the collector itself). Keeps
// which folded sections (details with an id) are open. Without this script the page is complete, only static.
(function () {
  'use strict';
  var main = document.getElementById('live');
  if (!main || !window.fetch) { return; }
  var every = parseInt(main.getAttribute('data-refresh-ms'), 10) || 2000;
  var refreshes = 0;
  function status(text) {
    var s = document.getElementById('live-status');
    if (s) { s.textContent = text; }
  }
  function address() {
    var q = location.search;
    return location.pathname + (q ? q + '&' : '?') + 'partial=1';
  }
  function apply(html) {
    var open = {};
    main.querySelectorAll('details[id]').forEach(function (d) { open[d.id] = d.open; });
    main.innerHTML = html;
    main.querySelectorAll('details[id]').forEach(function (d) {
      if (Object.prototype.hasOwnProperty.call(open, d.id)) { d.open = open[d.id]; }
    });
    refreshes += 1;
    document.body.setAttribute('data-refreshes', String(refreshes));
    status('live · updated ' + new Date().toLocaleTimeString());
  }
  function tick() {
    fetch(address(), { credentials: 'same-origin', cache: 'no-store' })
      .then(function (r) {
        if (!r.ok) { throw new Error('HTTP ' + r.status); }
        return r.text();
      })
      .then(apply)
      .catch(function (e) { status('not updated: ' + e.message); })
      .then(function () { setTimeout(tick, every); });
  }
  status('live · every ' + Math.round(every / 1000) + ' s');
  setTimeout(tick, every);
})();
