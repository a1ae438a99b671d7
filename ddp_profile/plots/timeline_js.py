"""The timeline's browser side: a canvas chart of :func:`~ddp_profile.plots.timeline.encode_for_page` data,
re-aggregated for the visible window at pixel resolution on every zoom, with the step and rank selectors.
Mirrors :func:`~ddp_profile.plots.timeline.bars_for_window` and ``_hover`` (same merge rule, same tooltip
text).

Why not plotly here: loading plotly.js alone takes seconds on a busy machine and an SVG bar per kernel
group is slow to draw and to hover; this chart needs neither, so the run page draws it before plotly is
even fetched. Each track's columns are decoded (base64 → typed array) only when its step is shown.

The page calls ``ddpTimeline(div, data, step_index, config, rank_or_null)`` once (config:
:func:`~ddp_profile.plots.timeline.page_config`), ``ddpShowStep(div, i)`` from the step selector and
``ddpShowRank(div, rank_or_null)`` from the rank selector; ``ddpUnfold(div[, row])`` (the button
#tl-unfold, or a click on a folded row's label) gives folded streams their own rows. A row with no track in
the shown step is not drawn. ``div.ddp`` is the chart's state and API (the
drawn bars per trace, ``text(k, i)``: a bar's tooltip, ``px``/``py``: data to pixel, ``zoom``/``reset``);
Keyboard: + / - zoom, arrows pan, 0 resets.
``div.__ddpDrawn`` counts draws; the first sets the performance mark ``ddp-timeline-drawn`` (the
benchmark's page-open time).
"""

TIMELINE_JS = r"""
var DDP_KIND=['compute kernel','NCCL kernel','memcpy','memset',,,,,,'kernel launch \u00b7 CPU',
    'sync, host waits for the GPU \u00b7 CPU'],
    DDP_PLURAL=['compute kernels','NCCL kernels','memcpys','memsets',,,,,,'launch calls','sync calls'],DDP_NTRACES=11,
    DDP_TAIL=8,DDP_M={l:190,r:20,t:8,b:44},DDP_ROW=44;
// Kernels (0-3) and the CPU rows' calls (9, 10) merge below a pixel; NVTX phases (4-7) and the tail (8) never.
function ddpMergeable(k){return k<4||k>8;}
// toFixed, but an exact tie rounds to even as Python's format() does (6.25 -> '6.2', not '6.3'), so the
// page's tooltips read exactly as ddp_profile.fmt.fmt_duration / fmt_bytes write them.
function ddpFix(v,d){var s=v.toFixed(d),e=Math.abs(v).toFixed(Math.min(100,d+60)),cut=e.indexOf('.')+1+d;
 if(!/^50*$/.test(e.slice(cut)))return s;var low=e.slice(0,d?cut:cut-1);
 return +low.slice(-1)%2?s:(v<0?'-':'')+low;}
// ddp_profile.fmt.sig: 3 significant digits, at most maxd decimals, whole digits kept, thousands separators.
function ddpSig(v,maxd){var a=Math.abs(v),d=a===0?maxd:isFinite(a)?Math.min(maxd,Math.max(0,2-Math.floor(Math.log10(a)))):0;
 if(a!==0&&d>0&&Math.abs(+ddpFix(a,d))>=Math.pow(10,3-d))d--;var s=ddpFix(v,d);
 if(/^-[0.]*$/.test(s))s=s.slice(1);var p=s.split('.');p[0]=p[0].replace(/\B(?=(\d{3})+(?!\d))/g,',');return p.join('.');}
function ddpDur(ns){var us=ddpSig(ns/1e3,1);return Math.abs(ns)>=1e6||Math.abs(+us.replace(/,/g,''))>=1000?
 ddpSig(ns/1e6,3)+' ms':us+' \u00b5s';}
function ddpBytes(n){if(n<0)return'\u2013';var u=['B','KiB','MiB','GiB'],i=0;
 while(n>=1024&&i<3){n/=1024;i++;}return i===0?ddpFix(n,0)+' B':ddpFix(n,1)+' '+u[i];}
function ddpCol(v){var bin=atob(v.slice(2)),n=bin.length,u=new Uint8Array(n);
 for(var i=0;i<n;i++)u[i]=bin.charCodeAt(i);
 return v[0]==='h'?new Uint16Array(u.buffer):v[0]==='i'?new Int32Array(u.buffer):new Float64Array(u.buffer);}
// A step's tracks as typed arrays: s/e absolute (ns from the step start), d, n and NCCL b, by, w, t.
function ddpDecode(st){if(st._dec)return st._dec;if(st.all)return ddpDecodeAll(st);st._dec=st.tracks.map(function(t){
 var ds=ddpCol(t.s),d=ddpCol(t.d),n=ds.length,s=new Float64Array(n),e=new Float64Array(n),acc=0,maxd=0;
 for(var i=0;i<n;i++){acc+=ds[i];s[i]=acc;e[i]=acc+d[i];if(d[i]>maxd)maxd=d[i];}
 var D={k:t.k,r:t.r,s:s,e:e,d:d,n:ddpCol(t.n),maxd:maxd};
 if(t.b){D.b=ddpCol(t.b);D.by=ddpCol(t.by);D.w=ddpCol(t.w);D.t=ddpCol(t.t);}return D;});return st._dec;}
// The all-steps view: every step's tracks laid end to end by the step's t0_ns, one track per (trace, row),
// sorted by start; a kernel overlapping two step windows appears once.
function ddpAllStep(data){if(data._all!==undefined)return data._all;var n=data.steps.length,span=0;
 data.steps.forEach(function(st){span=Math.max(span,(st.t0_ns||0)/1e6+st.span_ms);});
 data.steps.push({label:'all steps',step:null,span_ms:span,t0_ns:0,all:true,n:n,tracks:[]});return data._all=n;}
function ddpDecodeAll(st){var steps=st._data.steps.slice(0,st.n),groups={},keys=[];
 steps.forEach(function(s){var off=s.t0_ns||0;ddpDecode(s).forEach(function(D){var key=D.k*1e6+D.r;
  if(!groups[key]){groups[key]=[];keys.push(key);}groups[key].push([D,off]);});});
 st._dec=keys.sort(function(a,b){return a-b;}).map(function(key){var parts=groups[key],m=0,i,j;
  parts.forEach(function(p){m+=p[0].s.length;});var s=new Float64Array(m),d=new Float64Array(m),nn=new Float64Array(m),
   f=parts[0][0].b?{b:new Float64Array(m),by:new Float64Array(m),w:new Float64Array(m),t:new Float64Array(m)}:null,o=0;
  parts.forEach(function(p){var D=p[0];for(i=0;i<D.s.length;i++,o++){s[o]=D.s[i]+p[1];d[o]=D.d[i];nn[o]=D.n[i];
   if(f){f.b[o]=D.b[i];f.by[o]=D.by[i];f.w[o]=D.w[i];f.t[o]=D.t[i];}}});
  var idx=new Uint32Array(m);for(i=0;i<m;i++)idx[i]=i;idx.sort(function(a,b){return s[a]-s[b];});
  var keep=[];for(j=0;j<m;j++){i=idx[j];var p2=keep.length?keep[keep.length-1]:-1;
   if(p2>=0&&s[p2]===s[i]&&d[p2]===d[i]&&nn[p2]===nn[i])continue;keep.push(i);}
  var q=keep.length,D={k:Math.floor(key/1e6),r:key%1e6,s:new Float64Array(q),e:new Float64Array(q),d:new Float64Array(q),
   n:new Float64Array(q),maxd:0};if(f){D.b=new Float64Array(q);D.by=new Float64Array(q);D.w=new Float64Array(q);D.t=new Float64Array(q);}
  keep.forEach(function(i,x){D.s[x]=s[i];D.d[x]=d[i];D.e[x]=s[i]+d[i];D.n[x]=nn[i];if(d[i]>D.maxd)D.maxd=d[i];
   if(f){D.b[x]=f.b[i];D.by[x]=f.by[i];D.w[x]=f.w[i];D.t[x]=f.t[i];}});return D;});
 return st._dec;}
function ddpFirst(a,v){var lo=0,hi=a.length;while(lo<hi){var m=(lo+hi)>>1;if(a[m]<v)lo=m+1;else hi=m;}return lo;}
function ddpHover(data,st,D,a,b){var k=D.k,row=data.rows[D.r],c=b-a,nm=data.names[D.n[a]],
 where='start '+ddpDur(D.s[a]),text,i;
 if(!ddpMergeable(k)){var tail=k===DDP_TAIL;return '<b>'+nm+'</b>'+(tail?' \u00b7 '+st.label:'')+'<br>'+row+'<br>'+where+
  ' \u00b7 duration '+ddpDur(D.d[a])+(tail?'<br>end of backward \u2192 end of the last collective':'');}
 if(c===1){text='<b>'+nm+'</b><br>'+DDP_KIND[k]+' \u00b7 '+row+'<br>'+where+' \u00b7 duration '+ddpDur(D.d[a]);}
 else{var end=-Infinity,busy=0;for(i=a;i<b;i++){if(D.e[i]>end)end=D.e[i];busy+=D.d[i];}
  text='<b>'+c+' '+DDP_PLURAL[k]+' merged</b> (zoom in to separate)<br>'+row+'<br>'+where+' \u00b7 span '+
   ddpDur(end-D.s[a])+' \u00b7 busy '+ddpDur(busy)+'<br>first: '+nm;}
 if(D.b){var bmin=Infinity,bmax=-Infinity,by=0,hasBy=false,w=0,tr=0,hasW=false;
  for(i=a;i<b;i++){if(D.b[i]>=0){bmin=Math.min(bmin,D.b[i]);bmax=Math.max(bmax,D.b[i]);}
   if(D.by[i]>=0){by+=D.by[i];hasBy=true;}if(D.w[i]>=0){hasW=true;w+=D.w[i];if(D.t[i]>=0)tr+=D.t[i];}}
  var parts=[];if(bmin!==Infinity)parts.push('bucket'+(c>1?'s':'')+' '+(bmin===bmax?String(bmin):bmin+'\u2013'+bmax));
  if(hasBy)parts.push(ddpBytes(by));if(parts.length)text+='<br>'+parts.join(' \u00b7 ');
  if(hasW)text+='<br>wait '+ddpDur(w)+' \u00b7 transfer '+ddpDur(tr);}
 return text;}
// Bars of the kernels overlapping [lo, hi] (ns), sub-minns kernels of one track merged; rows not shown skipped.
// Per trace: base/x in ms, y (row), and the track and kernel range each bar holds (for its tooltip).
function ddpBars(data,idx,lo,hi,minns,shown){var st=data.steps[idx],out=[];
 for(var k=0;k<DDP_NTRACES;k++)out.push({base:[],x:[],y:[],tr:[],a:[],b:[]});
 ddpDecode(st).forEach(function(D,ti){if(shown&&!shown[D.r])return;var o=out[D.k],n=D.s.length,mn=ddpMergeable(D.k)?minns:0,
  j=ddpFirst(D.s,lo-D.maxd);
  while(j<n&&D.s[j]<=hi){if(D.e[j]<lo){j++;continue;}
   var a=j,end=D.e[j];
   if(D.d[j]<mn){while(j+1<n&&D.d[j+1]<mn&&D.s[j+1]-end<=mn){j++;if(D.e[j]>end)end=D.e[j];}}
   o.base.push(D.s[a]/1e6);o.x.push(Math.max(end-D.s[a],mn)/1e6);o.y.push(D.r);o.tr.push(ti);o.a.push(a);o.b.push(j+1);j++;}});
 return out;}
function ddpTicks(a,b,n){var step=Math.pow(10,Math.floor(Math.log10((b-a)/n))),f=(b-a)/n/step;
 step*=f>5?10:f>2?5:f>1?2:1;var out=[],v=Math.ceil(a/step)*step;for(;v<=b+step*1e-9;v+=step)out.push(v);
 return {v:out,dec:Math.max(0,-Math.floor(Math.log10(step)+1e-9))};}
function ddpEl(tag,cls,parent){var e=document.createElement(tag);if(cls)e.className=cls;if(parent)parent.appendChild(e);return e;}
function ddpTimeline(div,data,idx,cfg,rank){
 var T={data:data,cfg:cfg,idx:idx,range:null,full:[0,1],hidden:{},shown:null,bars:null,q:'',hits:[],cur:-1,open:{},rank:null};
 div.ddp=T;div.innerHTML='';
 var title=ddpEl('div','tl-title',div),find=ddpEl('div','tl-find',div),legend=ddpEl('div','tl-legend',div),
  wrap=ddpEl('div','tl-wrap',div),
  cv=ddpEl('canvas','',wrap),sel=ddpEl('div','tl-sel',wrap),tip=ddpEl('div','hovertext',wrap);
 wrap.style.position='relative';sel.style.cssText='position:absolute;display:none;background:rgba(0,114,178,.15);'+
  'border:1px solid #0072B2;pointer-events:none';
 tip.style.cssText='position:absolute;display:none;pointer-events:none;background:#fff;border:1px solid #888;'+
  'padding:4px 6px;font:12px system-ui,sans-serif;white-space:nowrap;z-index:2;box-shadow:0 1px 4px rgba(0,0,0,.2)';
 title.style.cssText='font-size:16px;margin:4px 0';legend.style.cssText='font-size:12px;margin:2px 0 4px';
 var used={};data.steps.forEach(function(st){(st.tracks||[]).forEach(function(t){used[t.k]=1;});});
 cfg.traces.forEach(function(tr,k){if(!used[k])return;  // no legend entry for what no step draws
  var b=ddpEl('button','tl-leg',legend);b.type='button';b.setAttribute('aria-pressed','true');
  b.style.cssText='border:0;background:none;cursor:pointer;margin-right:10px;font:inherit';
  var sw=ddpEl('span','',b);sw.style.cssText='display:inline-block;width:14px;height:10px;margin-right:4px;background:'+(tr.hatch?
   'repeating-linear-gradient(135deg,'+tr.color+' 0 3px,rgba(255,255,255,.6) 3px 4px)':tr.color);
  b.appendChild(document.createTextNode(tr.name));
  b.addEventListener('click',function(){T.hidden[k]=!T.hidden[k];b.style.opacity=T.hidden[k]?0.4:1;
   b.setAttribute('aria-pressed',String(!T.hidden[k]));ddpPaint(div);});});
 T.title=title;T.canvas=cv;T.tip=tip;
 // Find a kernel by name: every kernel of the shown step (or all steps) whose name holds the text (any
 // case) is outlined; Enter or the arrows zoom to the next / previous one.
 find.style.cssText='font-size:13px;margin:4px 0';var lab=ddpEl('label','',find);lab.textContent='Find kernel: ';
 var qi=ddpEl('input','',lab);qi.type='search';qi.id='tl-search';qi.placeholder='name contains\u2026';qi.size=28;
 var pv=ddpEl('button','',find),nx=ddpEl('button','',find),stat=ddpEl('span','note',find);
 pv.type=nx.type='button';pv.id='tl-prev';nx.id='tl-next';pv.textContent='\u25c0 previous';nx.textContent='next \u25b6';
 pv.style.marginLeft='6px';stat.id='tl-search-status';stat.setAttribute('role','status');stat.style.marginLeft='8px';
 T.status=stat;qi.addEventListener('input',function(){ddpSearch(div,qi.value);});
 if((data.row_fold||[]).some(function(h){return h>=0;})){var uf=ddpEl('button','',find);uf.type='button';uf.id='tl-unfold';
  uf.style.marginLeft='12px';uf.setAttribute('aria-pressed','false');uf.textContent=ddpUnfoldText(data);T.unfold=uf;
  uf.addEventListener('click',function(){ddpUnfold(div);});}
 qi.addEventListener('keydown',function(e){if(e.key==='Enter'){ddpGo(div,e.shiftKey?-1:1);e.preventDefault();}});
 pv.addEventListener('click',function(){ddpGo(div,-1);});nx.addEventListener('click',function(){ddpGo(div,1);});
 T.search=function(q){return ddpSearch(div,q);};T.go=function(d){return ddpGo(div,d);};
 function ms(x){var r=T.range||T.full;return r[0]+(x-DDP_M.l)/T.pw*(r[1]-r[0]);}
 T.px=function(v){var r=T.range||T.full;return DDP_M.l+(v-r[0])/(r[1]-r[0])*T.pw;};
 T.py=function(y){var r=Math.round(y),p=T.pos[r];return DDP_M.t+(p+0.5+(y-r))*DDP_ROW;};
 T.zoom=function(lo,hi){var c=(lo+hi)/2;if(!(hi-lo>=1e-5)){lo=c-5e-6;hi=c+5e-6;}  // 10 ns at least
  T.range=[lo,hi];return ddpDraw(div,false);};
 T.reset=function(){T.range=null;return ddpDraw(div,true);};
 T.text=function(k,i){var b=T.bars[k],st=data.steps[T.idx];return ddpHover(data,st,ddpDecode(st)[b.tr[i]],b.a[i],b.b[i]);};
 T.at=function(x,y){var v=(y-DDP_M.t)/DDP_ROW,p=Math.floor(v),r=T.rowAt[p],off=v-p-0.5,tol=1/T.pw*((T.range||T.full)[1]-(T.range||T.full)[0]),
  t=ms(x),best=null;if(r===undefined||x<DDP_M.l)return null;
  for(var k=DDP_NTRACES-1;k>=0;k--){var L=cfg.traces[k].lane;if(T.hidden[k]||off<L[0]||off>L[0]+L[1])continue;
   var b=T.bars[k];for(var i=0;i<b.x.length;i++)if(T.pos[b.y[i]]===p&&b.base[i]-tol<=t&&b.base[i]+b.x[i]+tol>=t)best=[k,i];
   if(best)return best;}return null;};
 var drag=null;
 cv.addEventListener('mousedown',function(e){var x=e.offsetX;if(x<DDP_M.l||e.button!==0)return;drag=x;e.preventDefault();});
 window.addEventListener('mouseup',function(e){if(drag===null)return;var r=cv.getBoundingClientRect(),
  x=Math.min(Math.max(e.clientX-r.left,DDP_M.l),DDP_M.l+T.pw),a=Math.min(drag,x),b=Math.max(drag,x);drag=null;
  sel.style.display='none';if(b-a>=4)T.zoom(ms(a),ms(b));});
 cv.addEventListener('dblclick',function(){T.reset();});
 // a click on a folded row's label unfolds it (and on an unfolded one, folds it again)
 cv.addEventListener('click',function(e){if(e.offsetX>=DDP_M.l)return;var r=T.rowAt[Math.floor((e.offsetY-DDP_M.t)/DDP_ROW)],
  f=T.data.row_fold||[];if(r!==undefined&&f.indexOf(r)>=0)ddpUnfold(div,r);});
 // Keyboard: + and - zoom about the middle, the arrows pan a quarter of the view, 0 or Escape resets.
 cv.tabIndex=0;cv.setAttribute('aria-label','Timeline chart: + and - zoom, left and right arrows pan, 0 resets');
 cv.addEventListener('keydown',function(e){var r=T.range||T.full,w=r[1]-r[0],c=(r[0]+r[1])/2,k=e.key;
  if(k==='+'||k==='=')T.zoom(c-w/4,c+w/4);else if(k==='-')T.zoom(c-w,c+w);
  else if(k==='ArrowLeft'||k==='ArrowRight'){var d=(k==='ArrowLeft'?-w:w)/4;T.zoom(r[0]+d,r[1]+d);}
  else if(k==='0'||k==='Escape')T.reset();else return;e.preventDefault();});
 cv.addEventListener('mouseleave',function(){tip.style.display='none';});
 cv.addEventListener('mousemove',function(e){var x=e.offsetX,y=e.offsetY;
  if(drag!==null){sel.style.display='block';sel.style.left=Math.min(drag,x)+'px';sel.style.width=Math.abs(x-drag)+'px';
   sel.style.top=DDP_M.t+'px';sel.style.height=T.ph+'px';tip.style.display='none';return;}
  var hit=T.at(x,y);if(!hit){tip.style.display='none';return;}
  tip.innerHTML=T.text(hit[0],hit[1]);tip.style.display='block';
  tip.style.left=Math.min(x+12,Math.max(0,cv.clientWidth-tip.offsetWidth))+'px';
  tip.style.top=(y+14+tip.offsetHeight>cv.clientHeight?Math.max(0,y-tip.offsetHeight-8):y+14)+'px';});
 if(window.ResizeObserver)new ResizeObserver(function(){if(T.pw&&Math.abs(ddpWidth(div)-T.pw)>1)ddpDraw(div,!T.range);}).observe(wrap);
 return ddpShowRank(div,rank===undefined?null:rank,idx);}
// Aggregate the visible window (full: the whole step) at the canvas's pixel width, then paint.
function ddpWidth(div){return Math.max((div.ddp.canvas.parentNode.clientWidth||1000)-DDP_M.l-DDP_M.r,100);}
function ddpDraw(div,full){var T=div.ddp,st=T.data.steps[T.idx],px=T.pw=ddpWidth(div),lo,hi;
 if(full){T.range=null;lo=-Infinity;hi=Infinity;}else{var w=Math.max((T.range[1]-T.range[0])*1e6,1);lo=T.range[0]*1e6-w;hi=T.range[1]*1e6+w;}
 var minns=full?Math.max(st.span_ms*1e6,1)/px:Math.max((T.range[1]-T.range[0])*1e6,1)/px;
 T.bars=ddpBars(T.data,T.idx,lo,hi,minns,T.shown);
 if(full){var a=0,b=st.span_ms;T.bars.forEach(function(o){for(var i=0;i<o.x.length;i++){
  if(o.base[i]<a)a=o.base[i];if(o.base[i]+o.x[i]>b)b=o.base[i]+o.x[i];}});T.full=[a,b>a?b:a+1e-3];}
 ddpPaint(div);return Promise.resolve(div.__ddpDrawn);}
function ddpPaint(div){var T=div.ddp,cfg=T.cfg,cv=T.canvas,n=T.rowAt.length,pw=T.pw,ph=T.ph=Math.max(n,1)*DDP_ROW,
 W=pw+DDP_M.l+DDP_M.r,H=ph+DDP_M.t+DDP_M.b,dpr=window.devicePixelRatio||1,r=T.range||T.full;
 cv.width=Math.round(W*dpr);cv.height=Math.round(H*dpr);cv.style.width=W+'px';cv.style.height=H+'px';
 var c=cv.getContext('2d');c.setTransform(dpr,0,0,dpr,0,0);c.fillStyle='#fff';c.fillRect(0,0,W,H);
 var tk=ddpTicks(r[0],r[1],Math.max(2,Math.floor(pw/110)));c.strokeStyle='#eee';c.lineWidth=1;c.beginPath();
 tk.v.forEach(function(v){var x=Math.round(T.px(v))+0.5;c.moveTo(x,DDP_M.t);c.lineTo(x,DDP_M.t+ph);});
 for(var p=0;p<=n;p++){c.moveTo(DDP_M.l,DDP_M.t+p*DDP_ROW+0.5);c.lineTo(DDP_M.l+pw,DDP_M.t+p*DDP_ROW+0.5);}c.stroke();
 c.save();c.beginPath();c.rect(DDP_M.l,DDP_M.t,pw,ph);c.clip();
 T.bars.forEach(function(o,k){var tr=cfg.traces[k];if(T.hidden[k]||!o.x.length)return;c.globalAlpha=tr.opacity;
  c.fillStyle=tr.hatch?ddpHatch(c,tr.color):tr.color;
  for(var i=0;i<o.x.length;i++){var x0=T.px(o.base[i]),x1=T.px(o.base[i]+o.x[i]);if(x1<DDP_M.l||x0>DDP_M.l+pw)continue;
   c.fillRect(x0,T.py(o.y[i]+tr.lane[0]),Math.max(x1-x0,1),tr.lane[1]*DDP_ROW);}});
 if(T.hits.length){c.globalAlpha=1;c.strokeStyle='#000';c.lineWidth=1.5;var dec=ddpDecode(T.data.steps[T.idx]),drawn=0;
  for(var h=0;h<T.hits.length&&drawn<20000;h++){var D=dec[T.hits[h][0]],j=T.hits[h][1],L=cfg.traces[D.k].lane;
   if(T.pos[D.r]===undefined||T.hidden[D.k])continue;var a0=T.px(D.s[j]/1e6),a1=T.px(D.e[j]/1e6);
   if(a1<DDP_M.l||a0>DDP_M.l+pw)continue;var w=Math.max(a1-a0,3);drawn++;
   c.strokeStyle=h===T.cur?'#D55E00':'#000';c.strokeRect(a0-(w-(a1-a0))/2,T.py(D.r+L[0]),w,L[1]*DDP_ROW);}}
 c.restore();c.globalAlpha=1;c.fillStyle='#444';c.font='12px system-ui,sans-serif';c.textAlign='right';c.textBaseline='middle';
 var fo=T.data.row_fold||[];T.rowAt.forEach(function(row,p){var lab=T.data.rows[row];
  if(fo.indexOf(row)>=0)lab=T.open[row]?lab.replace('(folded)','(unfolded) \u25be'):lab+' \u25b8';
  c.fillText(lab,DDP_M.l-6,DDP_M.t+(p+0.5)*DDP_ROW);});
 c.textAlign='center';c.textBaseline='top';
 tk.v.forEach(function(v){c.fillText(v.toFixed(tk.dec),T.px(v),DDP_M.t+ph+4);});
 c.fillText(cfg.xtitle,DDP_M.l+pw/2,DDP_M.t+ph+24);c.strokeStyle='#888';c.strokeRect(DDP_M.l+0.5,DDP_M.t+0.5,pw,ph);
 if(!div.__ddpDrawn&&window.performance&&performance.mark)performance.mark('ddp-timeline-drawn');
 div.__ddpDrawn=(div.__ddpDrawn||0)+1;}
function ddpHatch(c,color){var p=document.createElement('canvas');p.width=p.height=6;var g=p.getContext('2d');
 g.fillStyle=color;g.fillRect(0,0,6,6);g.strokeStyle='rgba(255,255,255,.6)';g.beginPath();g.moveTo(0,6);g.lineTo(6,0);g.stroke();
 return c.createPattern(p,'repeat');}
function ddpEsc(t){return String(t).replace(/&/g,'&amp;').replace(/</g,'&lt;').replace(/>/g,'&gt;');}
// The kernels (traces 0-3, shown rows) of the shown step whose name holds q, in start order.
function ddpSearch(div,q){var T=div.ddp,data=T.data;T.q=q;T.hits=[];T.cur=-1;
 if(!q){T.status.textContent='';ddpPaint(div);return 0;}
 var needle=ddpEsc(q).toLowerCase(),hit=data.names.map(function(nm){return String(nm).toLowerCase().indexOf(needle)>=0;}),
  names={};ddpDecode(data.steps[T.idx]).forEach(function(D,ti){if(D.k>3||(T.shown&&!T.shown[D.r]))return;
  for(var j=0;j<D.n.length;j++)if(hit[D.n[j]]){T.hits.push([ti,j,D.s[j]]);names[D.n[j]]=1;}});
 T.hits.sort(function(a,b){return a[2]-b[2];});var n=T.hits.length,k=Object.keys(names).length;
 T.status.textContent=n?n+' kernel'+(n>1?'s':'')+' of '+k+' name'+(k>1?'s':'')+' match in '+data.steps[T.idx].label+
  ' (outlined; Enter or next zooms to each)':'no kernel name holds \u201c'+q+'\u201d in '+data.steps[T.idx].label;
 ddpPaint(div);return n;}
// Zoom to the next (d=1) or previous (d=-1) match, showing it with some context.
function ddpGo(div,d){var T=div.ddp;if(!T.hits.length)return null;T.cur=(T.cur+d+T.hits.length)%T.hits.length;
 var h=T.hits[T.cur],D=ddpDecode(T.data.steps[T.idx])[h[0]],s=D.s[h[1]]/1e6,e=D.e[h[1]]/1e6,F=T.full,
  // the match with 20x its length around it, but never wider than the step's own view (a long kernel
  // would zoom out) and kept inside it
  W=Math.min(Math.max((e-s)*21,0.02),Math.max(F[1]-F[0],(e-s)*1.1)),lo=(s+e)/2-W/2,hi=lo+W;
 if(W<=F[1]-F[0]){if(lo<F[0]){hi+=F[0]-lo;lo=F[0];}if(hi>F[1]){lo-=hi-F[1];hi=F[1];}}T.zoom(lo,hi);var nm=document.createElement('span');nm.innerHTML=T.data.names[D.n[h[1]]];
 T.status.textContent='match '+(T.cur+1)+' of '+T.hits.length+': '+nm.textContent+' at '+ddpDur(D.s[h[1]])+' ('+T.data.rows[D.r]+')';
 return T.cur;}
function ddpShowStep(div,i){var T=div.ddp;if(i==='all')i=ddpAllStep(T.data);var st=T.data.steps[i];if(st.all)st._data=T.data;T.idx=i;T.range=null;
 ddpLayout(div);
 T.title.textContent='Timeline \u00b7 '+st.label;var s=ddpEl('div','note',T.title);s.style.fontSize='12px';s.textContent=T.cfg.source;
 div.setAttribute('aria-label','Timeline \u00b7 '+st.label);
 T.cfg.xtitle=st.all?'time since the first step start (ms)':'time since step start (ms)';
 var p=ddpDraw(div,true);if(T.q)ddpSearch(div,T.q);return p;}
// Show one rank's rows (null: every rank); its rows keep their order.
function ddpShowRank(div,rank,i){var T=div.ddp,rr=T.data.row_rank;T.rank=rank;
 T.shown=rank===null?null:rr.map(function(r){return r===rank;});
 return ddpShowStep(div,i===undefined?(T.data.steps[T.idx].all?'all':T.idx):i);}
// Rows to draw for the shown step and rank: a row with no track in the step is dropped; a folded stream
// (row_fold >= 0) draws on its rank's shared row until that row is unfolded (T.open), then on its own.
function ddpLayout(div){var T=div.ddp,data=T.data,fold=data.row_fold||[],used={};T.pos={};T.rowAt=[];
 ddpDecode(data.steps[T.idx]).forEach(function(D){used[D.r]=1;if(fold[D.r]>=0)used[fold[D.r]]=1;});
 data.row_rank.forEach(function(r,row){if((T.rank!==null&&r!==T.rank)||!used[row])return;var h=fold[row];
  if(h>=0&&!T.open[h]){T.pos[row]=T.pos[h];return;}T.pos[row]=T.rowAt.length;T.rowAt.push(row);});}
// Unfold (or fold again) one rank's shared row (head), or every one (head undefined).
function ddpUnfold(div,head){var T=div.ddp,fold=T.data.row_fold||[],heads={};
 fold.forEach(function(h){if(h>=0)heads[h]=1;});var all=Object.keys(heads),to=head===undefined?!all.every(function(h){return T.open[h];}):!T.open[head];
 (head===undefined?all:[head]).forEach(function(h){T.open[h]=to;});
 if(T.unfold)T.unfold.textContent=all.every(function(h){return T.open[h];})?'Fold the streams again':ddpUnfoldText(T.data);
 if(T.unfold)T.unfold.setAttribute('aria-pressed',String(all.some(function(h){return T.open[h];})));
 ddpLayout(div);return ddpDraw(div,!T.range);}
function ddpUnfoldText(data){var n=(data.row_fold||[]).filter(function(h){return h>=0;}).length;
 return 'Show the '+n+' folded stream'+(n>1?'s':'')+' on their own rows';}
"""
