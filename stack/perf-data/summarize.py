"""Medians, ranges and ratios of a stack/perf-data/run.sh campaign: summarize.py DIR"""
import json,sys,glob,statistics as st,os
d=sys.argv[1]
for f in sorted(glob.glob(d+'/*.jsonl')):
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
