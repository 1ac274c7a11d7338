(function () {
  "use strict";
  var status = document.getElementById("f-status"), layer = document.getElementById("f-layer"),
      acc = document.getElementById("f-acc"), text = document.getElementById("f-text"),
      shown = document.getElementById("shown"), none = document.getElementById("none");
  var cards = Array.prototype.slice.call(document.querySelectorAll("details.card"));
  var cells = Array.prototype.slice.call(document.querySelectorAll("td.cell"));
  var rows = Array.prototype.slice.call(document.querySelectorAll(".grid tbody tr"));
  function matches(el, f) {
    var d = el.dataset;
    if (f.status === "@ok" && d.tone !== "ok") return false;
    if (f.status === "@notok" && d.tone === "ok") return false;
    if (f.status && f.status.charAt(0) !== "@" && d.status !== f.status) return false;
    if (f.layer && d.layer !== f.layer) return false;
    if (f.acc && d.acc !== f.acc) return false;
    for (var i = 0; i < f.words.length; i++) if (d.text.indexOf(f.words[i]) < 0) return false;
    return true;
  }
  function apply() {
    var f = { status: status.value, layer: layer.value, acc: acc.value,
              words: text.value.toLowerCase().split(/\s+/).filter(Boolean) };
    var n = 0;
    cards.forEach(function (c) { var ok = matches(c, f); c.hidden = !ok; if (ok) n++; });
    cells.forEach(function (c) { c.classList.toggle("dim", !matches(c, f)); });
    rows.forEach(function (r) {
      var any = r.querySelector("td.cell:not(.dim)") !== null;
      r.hidden = !any && (f.acc !== "" || f.words.length > 0);
      r.classList.toggle("dim", !any);
    });
    shown.textContent = n + " of " + cards.length + " images";
    none.hidden = n > 0;
    var q = new URLSearchParams();
    if (f.status) q.set("status", f.status);
    if (f.layer) q.set("layer", f.layer);
    if (f.acc) q.set("acc", f.acc);
    if (text.value) q.set("q", text.value);
    var s = q.toString();
    try { history.replaceState(null, "", s ? "#?" + s : location.pathname + location.search); } catch (e) { /* file: */ }
  }
  var start = location.hash.indexOf("#?") === 0 ? new URLSearchParams(location.hash.slice(2)) : null;
  if (start) {
    status.value = start.get("status") || ""; layer.value = start.get("layer") || "";
    acc.value = start.get("acc") || ""; text.value = start.get("q") || "";
  }
  [status, layer, acc].forEach(function (el) { el.addEventListener("change", apply); });
  text.addEventListener("input", apply);
  document.addEventListener("click", function (ev) {
    var a = ev.target.closest ? ev.target.closest("a[href^='#n']") : null;
    if (a) { var d = document.getElementById(a.getAttribute("href").slice(1)); if (d) d.open = true; }
    var b = ev.target.closest ? ev.target.closest("button.copy") : null;
    if (!b) return;
    var pre = document.getElementById(b.dataset.copy);
    var done = function () { b.textContent = "copied"; setTimeout(function () { b.textContent = "copy"; }, 1500); };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(pre.textContent).then(done, function () { select(pre); });
    } else { select(pre); }
  });
  function select(el) {
    var r = document.createRange(); r.selectNodeContents(el);
    var s = window.getSelection(); s.removeAllRanges(); s.addRange(r);
  }
  function bottom(card) {  // a log tail's last lines are the ones to read
    Array.prototype.forEach.call(card.querySelectorAll("pre.log"), function (p) { p.scrollTop = p.scrollHeight; });
  }
  cards.forEach(function (c) {
    if (c.open) bottom(c);
    c.addEventListener("toggle", function () { if (c.open) bottom(c); });
  });
  if (location.hash.indexOf("#n") === 0) {
    var t = document.getElementById(location.hash.slice(1)); if (t) t.open = true;
  }
  if (start) apply();
})();
