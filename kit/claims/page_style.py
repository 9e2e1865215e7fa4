"""What the claims page (``kit.claims.page``) looks like: each status's badge colours and
legend sentence, the order and titles of the studies, each paper's order of sections, the
page's CSS and its filter script (plain JavaScript, no external resource)."""

from __future__ import annotations

# Every status verify decides, in the order the counts table shows them, with its badge
# colours (background, text) and one sentence for the legend.
STATUSES: dict[str, tuple[str, str, str]] = {
    "reproduced": ("#1e7b34", "#ffffff",
                   "a measured value equal to the published value at its printed precision."),
    "by design": ("#2f6f73", "#ffffff",
                  "equal to the published value because the kit was built to the paper's "
                  "design (counts of mutants, trials, images; structural checks): never "
                  "counted as reproduced."),
    "direction reproduced": ("#9bd39b", "#10361a",
                             "on a stand-in substrate the finding the number supports holds "
                             "(the kit's effect is shown beside the paper's)."),
    "direction reversed": ("#f0902a", "#ffffff",
                           "on the stand-in substrate that finding does not hold."),
    "described": ("#8a8a8a", "#ffffff",
                  "the number describes the stand-in and has no paper-comparable meaning."),
    "consistent": ("#6f8796", "#ffffff",
                   "internal consistency only, never counted as a reproduction."),
    "hypothesis holds": ("#3b6fb6", "#ffffff",
                         "a hypothesis committed before its evidence holds by its decision "
                         "rule as first committed (no paper value)."),
    "hypothesis fails": ("#7a4fa3", "#ffffff",
                         "a hypothesis committed before its evidence fails by its decision "
                         "rule as first committed: a finding, not an error."),
    "differs": ("#c62828", "#ffffff", "a rule failed where agreement was required."),
    "not run here": ("#e4e4e4", "#333333", "the evidence is absent; the row says why."),
}
UNKNOWN = ("#ffffff", "#000000")
# The papers first, then the studies beyond them.
STUDY_ORDER = ("drift", "sciml", "realdrift", "corpus")
STUDY_TITLES = {
    "drift": "Drift paper: When Metamorphic Contrast Hurts",
    "sciml": "SciML paper: Domain-Validity-Gated Metamorphic Testing of Scientific ML "
             "Surrogates",
    "realdrift": "Beyond the papers: real drift across onnxruntime releases",
    "corpus": "Beyond the papers: named onnxruntime CPU defects"}
# Each paper's sections in the paper's order, by the start of the ledger's section name;
# a section no prefix names follows in order of first appearance.
SECTION_ORDER = {
    "drift": ("Methods", "Results", "Table 1", "Table 2", "Table 3", "Table 4", "Discussion",
              "Beyond the paper"),
    "sciml": ("Section 2", "Section 3", "Section 5.2", "Section 5.3", "Summary table",
              "Section 5.4", "Section 5.5", "Section 5.6", "Section 5.7", "Section 5.9",
              "Section 5.10", "Sections 6-8", "Appendix A", "Beyond the paper"),
}

# A printed table's columns in the paper's order (its other columns follow as they appear).
TABLE_COLUMNS = {
    "Table 1": ("TPR", "FPR", "AUROC", "AUPRC"),
    "Table 4": ("Metamorphic TPR", "Direct TPR", "Difference", "Metamorphic FPR"),
    "Section 5.2 MR-card-to-verdict map": ("MR card", "Rubric decision", "Runtime verdict",
                                           "Interpretation boundary"),
    "Summary table after Sec 5.3": ("Component", "Evidence", "Headline result", "Boundary"),
}

CSS = """
body{font-family:system-ui,sans-serif;margin:1.2em auto;max-width:1400px;padding:0 1em;
color:#222}
h1{margin-bottom:.2em}code{font-size:12px;overflow-wrap:anywhere}
table{border-collapse:collapse;margin:.6em 0 1.2em;width:100%;table-layout:fixed}
table.counts{table-layout:auto}.counts th,.counts td{overflow-wrap:normal;
word-break:normal;padding:3px 4px}.counts .badge{font-size:11px;padding:1px 4px}
th,td{border:1px solid #ccc;padding:3px 6px;font-size:13px;vertical-align:top;
text-align:left;overflow-wrap:anywhere;word-break:break-word}
th{background:#f3f3f3}td.num{text-align:right}
.badge{display:inline-block;padding:1px 7px;border-radius:9px;font-size:12px}
.verdict{font-size:18px;padding:2px 12px}
.problems{color:#b00020;border:2px solid #b00020;padding:.4em 1.6em;background:#fff3f3}
.note{font-size:11px;color:#555;margin-top:2px}
ul.legend{list-style:none;padding-left:0}ul.legend li{margin:.3em 0}nav.toc li{font-size:14px}
td.evidence a,td.evidence span{display:block;font-size:12px}
.filters{position:sticky;top:0;background:#fafafa;border:1px solid #ddd;padding:.4em .6em;
z-index:1;font-size:13px}.filters label{margin-right:.6em;white-space:nowrap}.hidden{display:none}
col.id{width:6em}col.sub{width:6.5em}col.st{width:9em}col.ev{width:11em}
details.entry>summary{cursor:pointer}details.entry[open]{background:#f7f7fb}
dl.explain{font-size:12px;margin:.3em 0;border-left:3px solid #bbc;padding-left:.5em}
dl.explain dt{font-weight:600;color:#444}dl.explain dd{margin:0 0 .3em}
.printed{font-size:12px;color:#333;margin-bottom:3px}
"""

SCRIPT = """
(function(){
  var boxes=document.querySelectorAll('.filters input[type=checkbox]');
  var search=document.getElementById('claim-search');
  function apply(){
    var on={study:{},status:{}};
    boxes.forEach(function(b){on[b.dataset.kind][b.value]=b.checked;});
    var q=search.value.trim().toUpperCase();
    var shown=0;
    document.querySelectorAll('.claim').forEach(function(e){
      var ok=on.study[e.dataset.study]&&on.status[e.dataset.status]&&
        (!q||e.dataset.claim.toUpperCase().indexOf(q)===0);
      e.classList.toggle('hidden',!ok); if(ok){shown++;}
    });
    // a table or fold with no row left is hidden; a search opens only the folds that
    // hold a match, and clearing it closes them again
    document.querySelectorAll('table').forEach(function(t){
      if(t.querySelector('tr.claim')){
        t.classList.toggle('hidden',!t.querySelector('tr.claim:not(.hidden)'));}});
    document.querySelectorAll('details.folded').forEach(function(d){
      if(d.dataset.initial===undefined){d.dataset.initial=d.open?'1':'0';}
      var any=d.querySelector('tr.claim:not(.hidden)')!==null;
      d.classList.toggle('hidden',!any);
      d.open=q?any:d.dataset.initial==='1';});
    document.getElementById('shown').textContent=shown;
    document.getElementById('no-match').classList.toggle('hidden',shown>0);
  }
  var given=new URLSearchParams(location.search);
  boxes.forEach(function(b){
    var only=given.get(b.dataset.kind); if(only){b.checked=only.split(',').indexOf(b.value)>=0;}
    b.addEventListener('change',apply);});
  if(given.get('claim')){search.value=given.get('claim');}
  search.addEventListener('input',apply);
  apply();
  var wide=document.documentElement.scrollWidth>document.documentElement.clientWidth;
  document.body.dataset.overflow=wide?'yes':'no';
  // a jump target lands below the sticky filter bar, whatever height it wraps to
  var bar=document.querySelector('.filters');
  function pad(){document.documentElement.style.scrollPaddingTop=
    (bar?bar.offsetHeight+8:0)+'px';}
  pad(); window.addEventListener('resize',pad);
  var target=location.hash&&document.getElementById(decodeURIComponent(location.hash.slice(1)));
  // a link to a claim opens what it explains (its cell's or row's folds) and any fold
  // around it, then lands below the bar
  if(target){
    for(var up=target.parentElement;up;up=up.parentElement){
      if(up.tagName==='DETAILS'){up.open=true;}}
    target.querySelectorAll('details').forEach(function(d){d.open=true;});
    target.scrollIntoView();
    var top=target.getBoundingClientRect().top, r=bar?bar.getBoundingClientRect():null;
    document.body.dataset.jump=r&&r.top<=top&&top<r.bottom-1?'under':'clear';}
  // keyboard focus on a cell or row shows what it explains, and leaving it closes what
  // focus alone opened; a click or Enter keeps it open (the focus that a click brings
  // first does not make that click close it again)
  document.querySelectorAll('details.entry>summary,details.note>summary').forEach(function(s){
    var d=s.parentElement;
    s.addEventListener('focus',function(){
      if(!d.open){d.open=true;d.dataset.byFocus='1';}});
    s.addEventListener('click',function(ev){
      if(d.dataset.byFocus){ev.preventDefault();delete d.dataset.byFocus;}});
    d.addEventListener('focusout',function(ev){
      if(d.dataset.byFocus&&!d.contains(ev.relatedTarget)){
        d.open=false;delete d.dataset.byFocus;}});
  });
  document.body.dataset.ready='yes';
})();
"""
