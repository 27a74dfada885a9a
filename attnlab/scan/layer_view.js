(function (cfg) {
  var grid = document.getElementById(cfg.grid), view = document.getElementById(cfg.view);
  var title = document.getElementById(cfg.view + '-title');
  var served = location.protocol.indexOf('http') === 0, win = 0, cache = {}, wtokens = {};
  function esc(t) { return t.replace(/[&<>]/g, function (c) { return {'&': '&amp;', '<': '&lt;', '>': '&gt;'}[c]; }); }
  // the drawing every attention view shares (reports/attention.py's ATTENTION_JS, before this script): a long
  // pattern arrives as 16-bit codes in base64 (packed_pattern), unpacked to Float32Array rows, NaN where masked
  var shared = attnlabAttention, scale = cfg.scale;
  function unpack(A) { return shared.unpack(A); }
  function masked(w) { return w === null || w === undefined || w !== w; }
  function patternsOf(key) {
    var p = win === 0 ? cfg.patterns[key] : cache[key + '@' + win];
    if (p) Object.keys(p).forEach(function (d) { p[d] = unpack(p[d]); });
    return p;
  }
  function tokensOf(d) { return win === 0 ? cfg.tokens[d] : (wtokens[win] || {})[d]; }
  function fetchHead(key, w) {  // served by `attnlab view`: the model of the run computes the head on window w
    var p = key.split('.');
    return fetch('api/pattern?layer=' + p[0] + '&head=' + p[1] + '&window=' + w).then(function (r) {
      return r.json(); }).then(function (res) {
      if (res.error) return res;
      if (w === 0) {
        cfg.patterns[key] = res.patterns;
        Object.keys(res.tokens).forEach(function (d) { cfg.tokens[d] = cfg.tokens[d] || res.tokens[d]; });
      } else { cache[key + '@' + w] = res.patterns; wtokens[w] = res.tokens; }
      return res;
    });
  }
  function show(key) {
    var parts = key.split('.'), l = +parts[0], h = +parts[1], saved = patternsOf(key);
    view.dataset.head = key; view.dataset.window = win; view.innerHTML = '';
    title.textContent = 'Layer ' + l + ', head ' + h + ': ' + cfg.domains.map(function (d) {
      return d + ' sink ' + cfg.sink[d][l][h].toFixed(3); }).join(', ') + ' (window ' + win + ')';
    if (!saved && served) {
      view.innerHTML = '<p class="note">Computing the pattern of this head with the model of the run...</p>';
      var w = win;
      fetchHead(key, w).then(function (res) {
        if (res.error) { view.innerHTML = '<p class="note">' + esc(res.error) + '</p>'; return; }
        if (view.dataset.head === key && win === w) show(key);
      });
      return;
    }
    if (!saved && win > 0) {
      view.innerHTML = '<p class="note">The scan saved patterns of its first window only (window 0); open the ' +
        'run with `attnlab view RUN_DIR` to compute any head on any window.</p>';
      return;
    }
    if (!saved) {
      view.innerHTML = '<p class="note">No pattern was saved for this head. Rerun the scan with --pattern-head ' +
        key + ' to keep it, or open the run with `attnlab view RUN_DIR` to compute any head (saved: ' +
        (Object.keys(cfg.patterns).join(', ') || 'none') + ').</p>';
      return;
    }
    cfg.domains.forEach(function (d, k) {
      var A = saved[d], tok = tokensOf(d) || [];
      if (!A) return;
      var lab = function (i) { return i + ' ' + JSON.stringify(tok[i] === undefined ? '?' : shared.label(tok[i])); };
      if (A.length > cfg.canvas_from) bigPattern(A, lab, 'L' + l + 'H' + h + ' on ' + d + ' (window ' + win + ')', k);
      else {
      var text = A.map(function (row, i) { return row.map(function (_, j) {
        return 'query ' + esc(lab(i)) + '<br>key ' + esc(lab(j)); }); });
      var div = document.createElement('div'); div.className = 'plot'; div.id = cfg.view + '-' + k;
      view.appendChild(div);
      var labels = A.map(function (_, i) { return lab(i); });  // the tokens on both axes (unique: with the index)
      var tick = {family: 'monospace', size: 9};
      Plotly.newPlot(div, [{type: 'heatmap', z: A, x: labels, y: labels, text: text, colorscale: scale.stops,
        zmin: scale.zmin, zmax: scale.zmax, hoverongaps: false, colorbar: {title: {text: 'weight'}},
        hovertemplate: '%{text}<br>weight %{z:.4f}<extra></extra>'}],
        {title: {text: 'L' + l + 'H' + h + ' on ' + d + ' (window ' + win + ')'}, plot_bgcolor: scale.masked,
         yaxis: {autorange: 'reversed',
         type: 'category', tickfont: tick, automargin: true, title: {text: 'query token'}},
         xaxis: {type: 'category', tickfont: tick, automargin: true, title: {text: 'key token'}},
         margin: {t: 50}, height: Math.min(900, 360 + 12 * A.length)},
        {responsive: true});
      }
      var box = document.createElement('div'); box.className = 'tokens';
      box.innerHTML = tok.map(function (t, i) { return '<span data-i="' + i + '">' + esc(t) + '</span>'; }).join('');
      box.addEventListener('mouseover', function (e) {
        var i = e.target.dataset ? e.target.dataset.i : undefined; if (i === undefined) return;
        box.querySelectorAll('span').forEach(function (s, j) { var w = j <= i && !masked(A[i][j]) ? A[i][j] : 0;
          s.style.background = 'rgba(215,25,28,' + Math.sqrt(w || 0) + ')';
          s.style.outline = j == i ? '1px solid #000' : ''; s.title = 'weight ' + (w || 0).toFixed(4); });
      });
      var cap = document.createElement('p'); cap.className = 'note';
      cap.textContent = d + ': hover a token (the query) to shade the tokens it attends to.';
      view.appendChild(cap); view.appendChild(box);
    });
  }
  // a long window (more than cfg.canvas_from tokens) on a canvas, one pixel per (query, key): a heat map with a
  // hover text per cell would hold T^2 strings; here a hover line names the query and key tokens and the weight
  function bigPattern(A, lab, name, k) {
    var n = A.length, wrap = document.createElement('div'); wrap.id = cfg.view + '-' + k; wrap.className = 'big';
    var head = document.createElement('p'); head.className = 'note';
    head.textContent = name + ': ' + n + ' tokens, one pixel per query (row) and key (column); hover a pixel.';
    var c = document.createElement('canvas'), tip = document.createElement('p'); tip.className = 'note tip';
    wrap.appendChild(head); wrap.appendChild(c); wrap.appendChild(tip); view.appendChild(wrap);
    shared.draw(c, A, scale);
    c.addEventListener('mousemove', function (e) {
      var r = c.getBoundingClientRect(), j = Math.floor((e.clientX - r.left) / r.width * n);
      var i = Math.floor((e.clientY - r.top) / r.height * n);
      if (i < 0 || j < 0 || i >= n || j >= n) return;
      tip.textContent = 'query ' + lab(i) + ', key ' + lab(j) + ': ' +
        (masked(A[i][j]) ? 'masked' : 'weight ' + A[i][j].toFixed(4));
    });
  }
  // all heads of a layer as small multiples on canvases (fast at any length), click one to enlarge it; past
  // cfg.thumb tokens a side each pixel is the maximum of its block (a 2,048-token head is 256 x 256 pixels, no
  // spike averaged away), in the one colour scale of every attention view
  function layerView(l) {
    var box = document.getElementById(cfg.view + '-layer-view'), d = cfg.domains[0], chain = Promise.resolve();
    box.innerHTML = '<p class="note">Layer ' + l + ', every head on ' + esc(d) + ' (window ' + win +
      '); click one to enlarge it.</p>';
    for (var h = 0; h < cfg.heads; h++) (function (key) {
      var fig = document.createElement('figure'); fig.className = 'multiple';
      var c = document.createElement('canvas'); c.dataset.head = key; c.title = 'L' + key.replace('.', 'H');
      var cap = document.createElement('figcaption'); cap.textContent = 'head ' + key.split('.')[1];
      fig.appendChild(c); fig.appendChild(cap); box.appendChild(fig);
      c.addEventListener('click', function () { show(key); view.scrollIntoView(); });
      var have = patternsOf(key);
      if (have && have[d]) { shared.draw(c, have[d], scale, cfg.thumb); return; }
      if (!served) { cap.textContent += ' (not saved)'; return; }
      var w = win;
      chain = chain.then(function () { return fetchHead(key, w).then(function (res) {
        if (!res.error && res.patterns[d]) shared.draw(c, res.patterns[d], scale, cfg.thumb); }); });
    })(l + '.' + h);
  }
  document.getElementById(cfg.view + '-layer').addEventListener('click', function () {
    layerView(+(view.dataset.head || '0.0').split('.')[0]); });
  document.getElementById(cfg.view + '-window').addEventListener('change', function (e) {
    win = Math.max(0, Math.min(cfg.windows - 1, parseInt(e.target.value, 10) || 0)); e.target.value = win;
    if (view.dataset.head) show(view.dataset.head);
  });
  grid.on('plotly_click', function (ev) { var p = ev.points[0]; show(p.y + '.' + p.x); });
  document.querySelectorAll('button[data-grid="' + cfg.grid + '"]').forEach(function (b) {
    b.addEventListener('click', function () { show(b.dataset.head); }); });
  var first = Object.keys(cfg.patterns)[0]; if (first) show(first);
})(__CFG__);
