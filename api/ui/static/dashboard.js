// Suanli dashboard: keeps a server-rendered page current from /ui/events (server-sent events).
// No framework, no build. It only sets text and class names; HTML comes from the server.
(function () {
  "use strict";
  var body = document.body;
  var page = body.dataset.page;
  var streamUrl = body.dataset.stream;
  var fragmentUrl = body.dataset.fragment;
  var live = document.getElementById("live");
  var mini = document.getElementById("mini");
  // The first frame with the server's HTML is done: the bench reads this mark (a task queued
  // from a frame callback runs after that frame is painted).
  requestAnimationFrame(function () { setTimeout(function () { performance.mark("suanli:painted"); }, 0); });
  // Read by the browser test and the speed bench.
  var info = window.suanli = { messages: 0, nodeUpdates: 0, counts: null, lastMessageAt: 0, connected: false };

  // Same function as views.bucket: 0 when nothing is allocated, then 1..10 by tenths.
  function bucket(used, total) {
    total = total || 1000;
    if (used <= 0 || total <= 0) return 0;
    return Math.min(10, Math.max(1, Math.ceil(used * 10 / total)));
  }

  // Same function as views.node_classes.
  function nodeClasses(health, status, cond, gpu, cpuUsed, cpuMilli) {
    var cls = "n";
    if (health === "SUSPECT") cls += " hs";
    else if (health === "DOWN" || status === "DOWN") cls += " hd";
    if (status === "CORDONED" || status === "DRAINING") cls += " sc";
    if (cond === "HOT" || cond === "CONGESTED" || cond === "DEGRADED") cls += " c" + cond.charAt(0);
    if (gpu.length) {
      var n = Math.min(gpu.length, 8);
      cls += " k" + n;
      for (var i = 0; i < n; i++) {
        var b = bucket(gpu[i], 1000);
        if (b) cls += " a" + i + "-" + b;
      }
    } else {
      cls += " cpu";
      var c = bucket(cpuUsed, cpuMilli);
      if (c) cls += " u" + c;
    }
    return cls;
  }

  function setText(el, text) {
    if (el && el.textContent !== String(text)) el.textContent = text;
  }

  function setCount(key, value) {
    var els = document.querySelectorAll('[data-count="' + key + '"]');
    for (var i = 0; i < els.length; i++) setText(els[i], value);
  }

  function onCounts(c) {
    info.counts = c;
    setCount("placed", c.placed);
    setCount("pending", c.pending);
    setCount("running", c.running);
    setCount("completed", c.completed);
    setCount("failed_unschedulable", c.failed + " · " + c.unschedulable);
    setText(mini, "placed " + c.placed + " · pending " + c.pending + " · running " + c.running);
  }

  function onCluster(s) {
    setCount("c_nodes", s.nodes);
    setCount("c_nodes_hint", s.gpus + " GPUs");
    setCount("c_gpu_pct", s.gpu_pct.toFixed(1) + " %");
    setCount("c_gpu_pct_hint", "CPU " + s.cpu_pct.toFixed(1) + " %");
    setCount("c_health", s.health.READY + " · " + s.health.SUSPECT + " · " + s.health.DOWN);
    setCount("c_health_hint", s.draining + " draining, " + s.cordoned + " cordoned");
    setCount("c_conditions", s.conditions.HOT + " · " + s.conditions.CONGESTED + " · " + s.conditions.DEGRADED);
    var zs = document.querySelectorAll("[data-zone-pct]");
    for (var i = 0; i < zs.length; i++) {
      var v = s.zones[zs[i].getAttribute("data-zone-pct")];
      if (v !== undefined) setText(zs[i], v.toFixed(1));
    }
  }

  // A page drawn before any node registered: the stream picked the first cell that did.
  function onCell(cell) {
    var names = document.querySelectorAll("[data-cell-name]");
    for (var i = 0; i < names.length; i++) setText(names[i], cell);
    var cells = document.getElementById("cells");
    if (cells) {
      var em = cells.querySelector("em");
      if (em) cells.removeChild(em);
      var a = document.createElement("a");
      a.href = "/ui/?cell=" + encodeURIComponent(cell);
      a.className = "on";
      a.textContent = cell;
      cells.appendChild(a);
    }
  }

  // ---- the cluster page: node changes in place
  var grids = null;
  function gridFor(zone, site) {
    if (grids === null) {
      grids = {};
      var all = document.querySelectorAll(".grid[data-site]");
      for (var i = 0; i < all.length; i++) grids[all[i].getAttribute("data-site")] = all[i];
    }
    var key = zone + "|" + site;
    if (grids[key]) return grids[key];
    var zones = document.getElementById("zones");
    if (!zones) return null;
    // A node registered after the page was drawn, in a site not drawn yet: add the site.
    var zoneEl = zones.querySelector('.zone[data-zone="' + CSS.escape(zone) + '"]');
    if (!zoneEl) {
      zoneEl = document.createElement("div");
      zoneEl.className = "zone";
      zoneEl.setAttribute("data-zone", zone);
      var h = document.createElement("h3");
      var zn = document.createElement("span");
      zn.className = "zn";
      zn.textContent = "zone " + (zone || "(not given)");
      h.appendChild(zn);
      zoneEl.appendChild(h);
      zones.appendChild(zoneEl);
    }
    var siteEl = document.createElement("div");
    siteEl.className = "site";
    var h4 = document.createElement("h4");
    h4.textContent = site || "(site not given)";
    siteEl.appendChild(h4);
    var grid = document.createElement("div");
    grid.className = "grid";
    grid.setAttribute("data-site", key);
    siteEl.appendChild(grid);
    zoneEl.appendChild(siteEl);
    grids[key] = grid;
    return grid;
  }

  function applyNode(en) {
    var idx = en[0];
    var el = document.getElementById("n" + idx);
    if (!el) {
      var grid = gridFor(en[7], en[8]);
      if (!grid) return;
      el = document.createElement("b");
      el.id = "n" + idx;
      grid.appendChild(el);
    }
    var cls = nodeClasses(en[1], en[2], en[3], en[4], en[5], en[6]);
    if (el.className !== cls) el.className = cls;
    info.nodeUpdates++;
  }

  function onNodes(list) {
    for (var i = 0; i < list.length; i++) applyNode(list[i]);
  }

  // ---- hover: the node's details, read when asked
  var inspect = document.getElementById("inspect");
  var hoverTimer = null, shown = null;
  function showNode(el) {
    var idx = el.id.slice(1);
    fetch("/ui/nodes/" + idx, { credentials: "same-origin" }).then(function (r) {
      return r.ok ? r.json() : null;
    }).then(function (n) {
      if (!n || shown !== el) return;
      inspect.textContent = "";
      var h = document.createElement("h5");
      h.textContent = n.node_id;
      inspect.appendChild(h);
      var g = document.createElement("div");
      g.className = "gpus";
      n.gpu_used.forEach(function (u, i) {
        var s = document.createElement("span");
        s.className = "g" + bucket(u, 1000);
        s.textContent = "GPU" + i + " " + (u / 10).toFixed(0) + "%";
        g.appendChild(s);
      });
      if (n.gpus) inspect.appendChild(g);
      var dl = document.createElement("dl");
      [["model", n.gpu_model ? n.gpu_model + " × " + n.gpus : "CPU only"],
       ["CPU", (n.cpu_used / 1000).toFixed(1) + " / " + (n.cpu_milli / 1000).toFixed(0) + " cores"],
       ["memory", (n.memory_used / 1024).toFixed(0) + " / " + (n.memory_mib / 1024).toFixed(0) + " GiB"],
       ["health", n.health + (n.status !== "READY" ? " · " + n.status : "")],
       ["condition", n.condition],
       ["place", [n.region, n.zone, n.site].filter(Boolean).join(" / ") || "–"],
       ["connector", n.connector]].forEach(function (kv) {
        var dt = document.createElement("dt"), dd = document.createElement("dd");
        dt.textContent = kv[0];
        dd.textContent = kv[1];
        dl.appendChild(dt);
        dl.appendChild(dd);
      });
      inspect.appendChild(dl);
      inspect.hidden = false;
    }).catch(function () {});
  }
  var zonesEl = document.getElementById("zones");
  if (zonesEl && inspect) {
    zonesEl.addEventListener("mouseover", function (ev) {
      var el = ev.target.closest ? ev.target.closest(".n") : null;
      if (!el || !el.id || el === shown) return;
      if (shown) shown.classList.remove("sel");
      shown = el;
      el.classList.add("sel");
      clearTimeout(hoverTimer);
      hoverTimer = setTimeout(function () { showNode(el); }, 60);
    });
    zonesEl.addEventListener("mouseleave", function () {
      clearTimeout(hoverTimer);
      if (shown) shown.classList.remove("sel");
      shown = null;
      inspect.hidden = true;
    });
  }

  // ---- other pages: read the page's part again when it changed (at most once a second)
  var main = document.getElementById("main");
  var inflight = false, again = false, lastFetch = 0;
  function refresh() {
    if (!fragmentUrl || !main) return;
    if (inflight) { again = true; return; }
    var active = document.activeElement;
    if (active && active.tagName === "INPUT" && main.contains(active)) { again = true; setTimeout(refresh, 1000); return; }
    inflight = true;
    setTimeout(function () {
      fetch(fragmentUrl, { credentials: "same-origin" }).then(function (r) {
        return r.ok ? r.text() : null;
      }).then(function (html) {
        if (html !== null) {
          var open = {};
          main.querySelectorAll("details[open]").forEach(function (d, i) { open[i] = true; });
          main.innerHTML = html;
          main.querySelectorAll("details").forEach(function (d, i) { if (open[i]) d.open = true; });
        }
      }).catch(function () {}).then(function () {
        inflight = false;
        lastFetch = Date.now();
        if (again) { again = false; refresh(); }
      });
    }, Math.max(0, lastFetch + 1000 - Date.now()));
  }

  // ---- the stream
  function stamp() {
    var d = new Date();
    return d.toTimeString().slice(0, 8);
  }
  function connect() {
    if (!streamUrl || !window.EventSource) return;
    var es = new EventSource(streamUrl);
    function seen() {
      info.messages++;
      info.lastMessageAt = Date.now();
      live.className = "live on";
      live.textContent = "live · " + stamp();
      live.title = "live updates: connected";
    }
    es.addEventListener("hello", function () { info.connected = true; seen(); });
    es.addEventListener("counts", function (ev) { onCounts(JSON.parse(ev.data)); seen(); });
    es.addEventListener("cluster", function (ev) { onCluster(JSON.parse(ev.data)); seen(); });
    es.addEventListener("cell", function (ev) { onCell(JSON.parse(ev.data).cell); seen(); });
    es.addEventListener("nodes", function (ev) { onNodes(JSON.parse(ev.data)); seen(); });
    es.addEventListener("changed", function () { refresh(); seen(); });
    es.onerror = function () {
      info.connected = false;
      live.className = "live off";
      live.textContent = "reconnecting…";
      live.title = "live updates: the connection dropped; the browser reconnects by itself";
    };
  }
  if (live) connect();

  // ---- the what-if run: poll its status every second; reload when it ends
  var run = document.getElementById("whatif-run");
  if (run && run.dataset.state === "running") {
    var stateEl = document.getElementById("whatif-state");
    var elapsedEl = document.getElementById("whatif-elapsed");
    var poll = function () {
      fetch(run.dataset.status, { credentials: "same-origin", cache: "no-store" }).then(function (r) {
        return r.ok ? r.json() : null;
      }).then(function (st) {
        if (!st) { setTimeout(poll, 1000); return; }
        stateEl.textContent = st.state;
        elapsedEl.textContent = String(st.elapsed_s);
        if (st.state === "running") setTimeout(poll, 1000);
        else location.reload();
      }, function () { setTimeout(poll, 1000); });
    };
    setTimeout(poll, 1000);
  }
})();
