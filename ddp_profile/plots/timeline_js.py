"""The timeline's browser side: re-aggregates :func:`~ddp_profile.plots.timeline.timeline_steps` data for
the visible window at pixel resolution on every zoom, and swaps steps. Mirrors
:func:`~ddp_profile.plots.timeline.bars_for_window` and ``_hover`` (same merge rule, same tooltip text).

The page calls ``ddpTimeline(div, data, step_index)`` once after ``Plotly.newPlot`` and
``ddpShowStep(div, data, i)`` from the step selector.
"""

TIMELINE_JS = r"""
var DDP_KIND=['compute kernel','NCCL kernel','memcpy','memset'],
    DDP_PLURAL=['compute kernels','NCCL kernels','memcpys','memsets'],DDP_NTRACES=9;
function ddpDur(ns){return Math.abs(ns)>=1e6?(ns/1e6).toFixed(3)+' ms':(ns/1e3).toFixed(1)+' \u00b5s';}
function ddpBytes(n){if(n<0)return'\u2013';var u=['B','KiB','MiB','GiB'],i=0;
 while(n>=1024&&i<3){n/=1024;i++;}return i===0?n.toFixed(0)+' B':n.toFixed(1)+' '+u[i];}
function ddpDecode(st){if(st._dec)return st._dec;st._dec=st.tracks.map(function(t){
 var n=t.s.length,s=new Float64Array(n),e=new Float64Array(n),acc=0,maxd=0;
 for(var i=0;i<n;i++){acc+=t.s[i];s[i]=acc;e[i]=acc+t.d[i];if(t.d[i]>maxd)maxd=t.d[i];}
 return {t:t,s:s,e:e,maxd:maxd};});return st._dec;}
function ddpFirst(a,v){var lo=0,hi=a.length;while(lo<hi){var m=(lo+hi)>>1;if(a[m]<v)lo=m+1;else hi=m;}return lo;}
function ddpHover(data,st,D,a,b){var t=D.t,k=t.k,row=data.rows[t.r],c=b-a,nm=data.names[t.n[a]],
 where='start '+ddpDur(D.s[a]),text,i;
 if(k>=4){var tail=k===DDP_NTRACES-1;return '<b>'+nm+'</b>'+(tail?' \u00b7 '+st.label:'')+'<br>'+row+'<br>'+where+
  ' \u00b7 duration '+ddpDur(t.d[a])+(tail?'<br>end of backward \u2192 end of the last collective':'');}
 if(c===1){text='<b>'+nm+'</b><br>'+DDP_KIND[k]+' \u00b7 '+row+'<br>'+where+' \u00b7 duration '+ddpDur(t.d[a]);}
 else{var end=-Infinity,busy=0;for(i=a;i<b;i++){if(D.e[i]>end)end=D.e[i];busy+=t.d[i];}
  text='<b>'+c+' '+DDP_PLURAL[k]+' merged</b> (zoom in to separate)<br>'+row+'<br>'+where+' \u00b7 span '+
   ddpDur(end-D.s[a])+' \u00b7 busy '+ddpDur(busy)+'<br>first: '+nm;}
 if(t.b){var bmin=Infinity,bmax=-Infinity,by=0,hasBy=false,w=0,tr=0,hasW=false;
  for(i=a;i<b;i++){if(t.b[i]>=0){bmin=Math.min(bmin,t.b[i]);bmax=Math.max(bmax,t.b[i]);}
   if(t.by[i]>=0){by+=t.by[i];hasBy=true;}if(t.w[i]>=0){hasW=true;w+=t.w[i];if(t.t[i]>=0)tr+=t.t[i];}}
  var bk=bmin===Infinity?'\u2013':(bmin===bmax?String(bmin):bmin+'\u2013'+bmax);
  text+='<br>bucket'+(c>1?'s':'')+' '+bk+' \u00b7 '+ddpBytes(hasBy?by:-1);
  if(hasW)text+='<br>wait '+ddpDur(w)+' \u00b7 transfer '+ddpDur(tr);}
 return text;}
function ddpBars(data,idx,lo,hi,minns){var st=data.steps[idx],out=[];
 for(var k=0;k<DDP_NTRACES;k++)out.push({base:[],x:[],y:[],hovertext:[]});
 ddpDecode(st).forEach(function(D){var t=D.t,o=out[t.k],n=D.s.length,mn=t.k<4?minns:0,
  j=ddpFirst(D.s,lo-D.maxd);
  while(j<n&&D.s[j]<=hi){if(D.e[j]<lo){j++;continue;}
   var a=j,end=D.e[j];
   if(t.d[j]<mn){while(j+1<n&&t.d[j+1]<mn&&D.s[j+1]-end<=mn){j++;if(D.e[j]>end)end=D.e[j];}}
   o.base.push(D.s[a]/1e6);o.x.push(Math.max(end-D.s[a],mn)/1e6);o.y.push(t.r);
   o.hovertext.push(ddpHover(data,st,D,a,j+1));j++;}});
 return out;}
function ddpDraw(div,data,full){var idx=div.__ddpStep,st=data.steps[idx],ax=div._fullLayout.xaxis,
 px=Math.max(ax._length||1000,100),lo,hi,minns;
 if(full){lo=-Infinity;hi=Infinity;minns=Math.max(st.span_ms*1e6,1)/px;}
 else{var a=ax.range[0]*1e6,b=ax.range[1]*1e6,w=Math.max(b-a,1);minns=w/px;lo=a-w;hi=b+w;}
 var bars=ddpBars(data,idx,lo,hi,minns),u={base:[],x:[],y:[],hovertext:[]},ids=[];
 bars.forEach(function(b,k){u.base.push(b.base);u.x.push(b.x);u.y.push(b.y);u.hovertext.push(b.hovertext);ids.push(k);});
 div.__ddpBusy=true;var lay={};
 if(full){lay['xaxis.autorange']=true;if(div.layout&&div.layout.title)
  lay['title.text']=div.layout.title.text.replace(/Timeline \u00b7 [^<]*/,'Timeline \u00b7 '+st.label);}
 var p=full?Plotly.update(div,u,lay,ids):Plotly.restyle(div,u,ids);
 return Promise.resolve(p).then(function(){div.__ddpBusy=false;div.__ddpDrawn=(div.__ddpDrawn||0)+1;});}
function ddpTimeline(div,data,idx){div.__ddpStep=idx;
 div.on('plotly_relayout',function(ev){if(div.__ddpBusy||!ev)return;
  var keys=Object.keys(ev).filter(function(k){return k.indexOf('xaxis')===0;});if(!keys.length)return;
  ddpDraw(div,data,!!ev['xaxis.autorange']);});
 return ddpDraw(div,data,true);}
function ddpShowStep(div,data,i){div.__ddpStep=i;return ddpDraw(div,data,true);}
"""
