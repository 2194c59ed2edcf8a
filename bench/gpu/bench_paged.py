# SPDX-License-Identifier: MIT
"""Chunked prefill over a paged KV cache (bench_sdpa.py --paged).

q 2048 new rows per sequence against kv 8k ... 64k cached keys (the chunk
is the last 2048 of them: bottom-right causal), GQA 8:1 (32 q heads, 4 kv
heads), d 128, K/V in a page pool [pages, page, 4, 128] addressed through a
shuffled block table, page 16 and 64. Timed side by side:

  ours        fa_plan_forward on the paged problem, dispatch's kernel
              (cuda.sm90.* on an H200);
  ours sm80   the same plan on a context bound to cuda.sm80.<dt>.d128;
  ours dense  ours on the same keys gathered into a dense [b, kv, 4, 128]
              cache: the paging overhead is ours / ours dense;
  FA2, cuDNN  torch SDPA on that dense cache (enable_gqa, lower-right
              causal bias). Torch exposes no paged attention, so these
              are dense problems of the same shape: they bound what a
              paged kernel of theirs could do (paging only adds work).

Published (cuDNN 9.27, H200): 680 TFLOPS at q2048 x kv8k d128 (paged
prefill); printed beside our kv 8k rows.

FLOPs: 4 * b * hq * d * (visible (query, key) pairs), the pairs counted
exactly for the bottom-right mask: sq * (sk - sq) + sq * (sq + 1) / 2 per
(sequence, head). Checks: ours paged is bitwise equal to ours dense when
both run the same kernel (paging changes which bytes are read, not the
arithmetic), and within 2e-2 (relative Frobenius) of FA2's output.
"""
import ctypes

import torch
from torch.nn.attention import SDPBackend

PUBLISHED_CUDNN = {8192: 680.0}  # kv length -> TFLOPS, cuDNN 9.27 H200


def paged_suite(fa, args, tdtype, fdtype, helpers):
    (FaAttention, bshd, time_calls, time_or_nan, rel_err, causal_br,
     sdpa_call) = helpers
    rows = []
    b, sq, hq, hkv, d = args.paged_batch, 2048, 32, 4, 128
    lens = [8192, 16384, 32768, 65536]
    if args.quick:
        lens = [8192, 32768]
    gen = torch.Generator(device="cpu").manual_seed(0)
    for sk in lens:
        for page in (16, 64):
            n_pages = b * sk // page
            kp = torch.randn(n_pages, page, hkv, d, device="cuda",
                             dtype=tdtype)
            vp = torch.randn_like(kp)
            perm = torch.randperm(n_pages, generator=gen)
            table = perm.view(b, sk // page).to(torch.int32).cuda()
            # The same keys, dense: row j of sequence i is slot j % page
            # of page table[i][j / page].
            kd = kp[table.long()].reshape(b, sk, hkv, d)
            vd = vp[table.long()].reshape(b, sk, hkv, d)
            q = torch.randn(b, sq, hq, d, device="cuda", dtype=tdtype)
            o = torch.empty_like(q)
            o80 = torch.empty_like(q)
            od = torch.empty_like(q)
            lse = torch.empty(b, hq, sq, device="cuda", dtype=torch.float32)

            def problem(paged):
                a = FaAttention()
                fa.lib.fa_attention_init(ctypes.byref(a))
                a.batch, a.seqlen_q, a.seqlen_k = b, sq, sk
                a.heads_q, a.heads_kv, a.head_dim = hq, hkv, d
                a.causal = 1  # FA_CAUSAL_BOTTOM_RIGHT
                if paged:
                    a.block_table = table.data_ptr()
                    a.max_blocks_per_seq = sk // page
                    a.page_size = page
                    a.num_pages = n_pages
                return a

            ap, ad = problem(True), problem(False)
            tq = bshd(q, fdtype)
            tkp, tvp = bshd(kp, fdtype), bshd(vp, fdtype)  # [pages][page]
            tkd, tvd = bshd(kd, fdtype), bshd(vd, fdtype)
            to, to80, tod = (bshd(x, fdtype) for x in (o, o80, od))
            plan, desc = fa.plan(ap, fdtype, (tq, tkp, tvp, to))
            dt = "f16" if fdtype == 1 else "bf16"  # (e4m3 runs bf16 here)
            plan80, desc80 = fa.plan(ap, fdtype, (tq, tkp, tvp, to80),
                                     fa.bound("cuda.sm80.%s.d%d" % (dt, d)))
            pland, descd = fa.plan(ad, fdtype, (tq, tkd, tvd, tod))

            def planned(pl, k, v, out, what):
                def run():
                    st = fa.lib.fa_plan_forward(pl, tq, k, v, out,
                                                lse.data_ptr())
                    if st:
                        fa.check(st, what)
                return run

            ours = planned(plan, tkp, tvp, to, "fa_plan_forward (paged)")
            ours80 = planned(plan80, tkp, tvp, to80, "fa_plan_forward (sm80)")
            oursd = planned(pland, tkd, tvd, tod, "fa_plan_forward (dense)")
            qt, kt, vt = (x.transpose(1, 2) for x in (q, kd, vd))
            mask = causal_br(sq, sk)

            def sdpa(backend):
                return sdpa_call(backend, qt, kt, vt, attn_mask=mask,
                                 enable_gqa=True)

            for x in (o, o80, od):
                x.fill_(float("nan"))
            ours()
            ours80()
            oursd()
            ref_name = "fa2"
            try:
                ref = sdpa(SDPBackend.FLASH_ATTENTION)().transpose(1, 2)
            except Exception as e:  # no GQA or lower-right mask in FA2 here
                print("  FA2: %s" % str(e).splitlines()[0])
                ref, ref_name = od, "ours dense"  # then say so in the row
            kernel = desc.split("kernel=")[1].split()[0]
            kernel_d = descd.split("kernel=")[1].split()[0]
            err = rel_err(o, ref)
            err80 = rel_err(o80, ref)
            same = kernel == kernel_d and torch.equal(o, od)
            pairs = sq * (sk - sq) + sq * (sq + 1) // 2
            flops = 4.0 * b * hq * d * pairs
            iters = max(3, min(30, int(2e12 / flops)))
            t = dict(ours=time_calls(ours, iters),
                     sm80=time_calls(ours80, iters),
                     dense=time_calls(oursd, iters))
            for name, backend in (("fa2", SDPBackend.FLASH_ATTENTION),
                                  ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                t[name] = time_or_nan(name, lambda: sdpa(backend), iters)
            tf = {k: flops / v / 1e9 for k, v in t.items()}
            row = dict(b=b, sq=sq, sk=sk, page=page, hq=hq, hkv=hkv, d=d,
                       kernel=kernel, kernel_dense=kernel_d,
                       ours_tflops=tf["ours"], sm80_tflops=tf["sm80"],
                       dense_tflops=tf["dense"], fa2_dense_tflops=tf["fa2"],
                       cudnn_dense_tflops=tf["cudnn"],
                       cudnn_published_tflops=PUBLISHED_CUDNN.get(
                           sk, float("nan")),
                       err_vs_fa2=err, sm80_err_vs_fa2=err80, ref=ref_name,
                       bitwise_vs_dense=same, plan=desc)
            rows.append(row)
            print("paged q%d kv%-5d page %-2d  ours %6.1f  sm80 %6.1f  "
                  "dense %6.1f  FA2(dense) %6.1f  cuDNN(dense) %6.1f  "
                  "published %6.1f TFLOPS  ours/dense %.2f  err vs %s %.1e "
                  "(sm80 %.1e) bitwise=%s  [%s]" % (
                      sq, sk, page, tf["ours"], tf["sm80"], tf["dense"],
                      tf["fa2"], tf["cudnn"], row["cudnn_published_tflops"],
                      tf["ours"] / tf["dense"], ref_name, err, err80, same,
                      kernel),
                  flush=True)
            for pl in (plan, plan80, pland):
                fa.lib.fa_plan_destroy(pl)
            del kp, vp, kd, vd, q, o, o80, od, lse, ref, table
    return rows


def paged_table(rows, dtype):
    print("\nchunked prefill, paged KV (%s TFLOPS; q2048, GQA 32/4, d128, "
          "bottom-right causal; FA2/cuDNN on the dense cache)" % dtype)
    print("| kv | page | kernel | ours | sm80 | ours dense | FA2 dense "
          "| cuDNN dense | cuDNN published | ours/dense | ours/cuDNN dense |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- "
          "| --- |")
    for r in rows:
        print("| %d | %d | %s | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f "
              "| %.2f | %.2f |" % (
                  r["sk"], r["page"], r["kernel"], r["ours_tflops"],
                  r["sm80_tflops"], r["dense_tflops"], r["fa2_dense_tflops"],
                  r["cudnn_dense_tflops"], r["cudnn_published_tflops"],
                  r["ours_tflops"] / r["dense_tflops"],
                  r["ours_tflops"] / r["cudnn_dense_tflops"]))


def paged_bad(rows):
    """Rows whose output is wrong (NaN compares as wrong)."""
    return [r for r in rows
            if not (r["err_vs_fa2"] < 2e-2 and r["sm80_err_vs_fa2"] < 2e-2)]
