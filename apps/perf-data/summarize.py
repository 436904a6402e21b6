"""Medians, ranges and ratios of an apps/perf-data/run.sh campaign: summarize.py DIR"""
import json,sys,glob,statistics as st,os
d=sys.argv[1]
PERF=[f for f in sorted(glob.glob(d+'/*.jsonl')) if os.path.basename(f) not in ('loopback.jsonl','kv.jsonl','sim.jsonl')]
for f in PERF:
    rows=[]
    for line in open(f):
        load,_,js=line.partition(' ')
        try: j=json.loads(js)
        except Exception: print(os.path.basename(f),'BAD',js[:200]); continue
        rows.append((float(load),j))
    if not rows: continue
    j0=rows[0][1]
    med=lambda xs: st.median(xs) if xs else float('nan')
    loads=[r[0] for r in rows]
    if j0['mode']=='bw':
        bw=[r[1]['bw_avg_gbps'] for r in rows]; mr=[r[1]['msg_rate_mpps'] for r in rows]
        ubw=[r[1]['baseline']['bw_avg_gbps'] for r in rows]; ump=[r[1]['baseline']['msg_rate_mpps'] for r in rows]
        rbw=[r[1]['ratio']['bw_avg_gbps'] for r in rows]; rmr=[r[1]['ratio']['msg_rate_mpps'] for r in rows]
        rt=[r[1]['retransmitted_packets'] for r in rows]
        print(f"{os.path.basename(f):40s} n={len(rows)} bw {med(bw):6.2f} Gb/s ({min(bw):.2f}-{max(bw):.2f}) rate {med(mr):.3f} Mpps | udp {rows[0][1]['baseline']['size']}B {med(ubw):6.2f} Gb/s {med(ump):.3f} Mpps | ratio bw {med(rbw):.2f} ({min(rbw):.2f}-{max(rbw):.2f}) rate {med(rmr):.2f} ({min(rmr):.2f}-{max(rmr):.2f}) | retx {rt} load {min(loads)}-{max(loads)}")
    else:
        t=[r[1]['t_typical_us'] for r in rows]; ut=[r[1]['baseline']['t_typical_us'] for r in rows]
        rr=[r[1]['ratio']['t_typical_us'] for r in rows]
        p99=[r[1]['t_p99_us'] for r in rows]
        print(f"{os.path.basename(f):40s} n={len(rows)} t_typ {med(t):.2f} us ({min(t):.2f}-{max(t):.2f}) p99 {med(p99):.1f} | udp {med(ut):.2f} us | ratio {med(rr):.2f} ({min(rr):.2f}-{max(rr):.2f}) load {min(loads)}-{max(loads)}")

# The exchange baseline (READ and atomic bandwidth): plain UDP in the operation's own shape.
for f in PERF:
    rows=[]
    for line in open(f):
        try: rows.append(json.loads(line.partition(' ')[2]))
        except Exception: pass
    rows=[j for j in rows if j.get('exchange_baseline')]
    if not rows: continue
    x=[j['exchange_baseline']['msg_rate_mpps'] for j in rows]
    xr=[j['exchange_ratio']['msg_rate_mpps'] for j in rows]
    xb=[j['exchange_baseline']['msg_rate_mpps']/j['baseline']['msg_rate_mpps'] for j in rows]
    e=rows[0]['exchange_baseline']
    print(f"{os.path.basename(f):40s} exchange {e['request_size']}B -> {e['replies']}x{e['size']}B: {st.median(x):.3f} M req/s | roce / exchange {st.median(xr):.2f} ({min(xr):.2f}-{max(xr):.2f}) | exchange / blast {st.median(xb):.2f} ({min(xb):.2f}-{max(xb):.2f})")

# READ and SEND against WRITE, paired run by run (the campaign runs them back to back).
def load(name):
    out=[]
    try:
        for line in open(os.path.join(d,name)):
            try: out.append(json.loads(line.partition(' ')[2]))
            except Exception: out.append(None)
    except FileNotFoundError: pass
    return out
for size,key,extra in [('65536','bw_avg_gbps','_--mtu_4096_-n_10000'),('64','msg_rate_mpps','_-n_300000')]:
    w=load(f'write_-s_{size}{extra}.jsonl')
    for op in ['read','send']:
        o=load(f'{op}_-s_{size}{extra}.jsonl')
        r=[b[key]/a[key] for a,b in zip(w,o) if a and b]
        if r: print(f"{op.upper()} / WRITE at {size} B ({key}), paired: median {st.median(r):.3f} ({min(r):.3f}-{max(r):.3f}) runs: {' '.join('%.2f'%x for x in r)}")
for op in ['read','send']:
    w=load('write_--lat_-s_8_-n_20000.jsonl'); o=load(f'{op}_--lat_-s_8_-n_20000.jsonl')
    r=[b['t_typical_us']/a['t_typical_us'] for a,b in zip(w,o) if a and b]
    if r: print(f"{op.upper()} / WRITE 8 B latency (typical), paired: median {st.median(r):.3f} ({min(r):.3f}-{max(r):.3f})")

# The other runs of an ab.sh campaign: the default loopback, the KV push, the congestion suite.
lb=[j for j in load('loopback.jsonl') if j]
if lb:
    g=[j['gbps'] for j in lb]; t=[j['seconds'] for j in lb]
    print(f"loopback (defaults): n={len(lb)} ok={all(j['ok'] for j in lb)} goodput {st.median(g):.2f} Gb/s ({min(g):.2f}-{max(g):.2f}), time {st.median(t):.3f} s, retransmitted {sum(j['retransmitted_packets'] for j in lb)}")
kv=[j for j in load('kv.jsonl') if j]
if kv:
    print(f"kv (defaults): n={len(kv)} ok={all(j['ok'] for j in kv)} bandwidth {st.median([j['bandwidth_gbps'] for j in kv]):.2f} Gb/s, per WR {st.median([j['per_wr_seconds'] for j in kv])*1e6:.2f} us")
    for i,p in enumerate(kv[0]['plans']):
        ms=[j['plans'][i]['seconds']*1e3 for j in kv]
        print(f"  {p['name']:24s} WRs {p['wrs']:7d}  {st.median(ms):8.2f} ms ({min(ms):.2f}-{max(ms):.2f})")
sim=[j for j in load('sim.jsonl') if j]
if sim:
    for i,r in enumerate(sim[0]['runs']):
        keys=['fairness','utilization','tail_drops','retransmitted_packets','mean_queue_bytes','cnps']
        vals=[{k:j['runs'][i].get(k) for k in keys} for j in sim]
        same=all(v==vals[0] for v in vals)
        print(f"  sim {r['name']:28s} {vals[0]} {'(same every run)' if same else '(differs between runs!)'}")
