"""Every public method of each released ``DeepSeekV4TokenToKVPool``, classified, read from source.

The classification is by hand (``CATEGORY``): what a method hands its caller. Whether it is gated
(calls ``self.wait_layer_transfer`` before reading) is read from each release's source with
``ast``, never assumed. ``python -m tests.probe.accessors`` prints the table docs/probe.md
carries; tests/probe/test_release_probe.py checks that the table is current, that every method
of every supported release is classified (a new accessor fails the test until it is), and that
the probe wraps every index-K read.
"""

from __future__ import annotations

import ast
import sys

from exporter.footprint.releases import PUBLISHED_RELEASES, parse_release, release_name
from exporter.probe.targets import POOL_METHODS
from tests.sglang_release import release_dir

# Each published release once (post releases share their release's pool file).
RELEASES = tuple(dict.fromkeys(release_name(parse_release(v)) for v in PUBLISHED_RELEASES))
POOL_FILE = "sglang/srt/mem_cache/deepseek_v4_memory_pool.py"
POOL_CLASS = "DeepSeekV4TokenToKVPool"

INDEX_K = "index-K read"
KV = "KV read"
STATE = "state read"
SETTER = "setter"
VIEW = "buffer view (write path, transfer)"
META = "metadata"
UNIMPLEMENTED = "not implemented (raises)"
GATE = "the gate itself"

CATEGORY: dict[str, str] = {
    "get_index_k_with_scale_buffer": INDEX_K,
    "get_index_k_scale_buffer": INDEX_K,
    "get_index_k_fp4_payload_buffer": INDEX_K,
    "get_index_k_fp4_scale_buffer": INDEX_K,
    "get_low_ratio_index_k_dequant": INDEX_K,
    "get_low_ratio_index_k_fp4": INDEX_K,
    "get_swa_key_buffer": KV,
    "get_swa_key_buffer_radix": KV,
    "get_extra_key_buffer": KV,
    "get_unified_kv": KV,
    "get_unified_kv_rope": KV,
    "get_attention_compress_states": STATE,
    "get_indexer_compress_states": STATE,
    "get_swa_raw_buffer": VIEW,
    "unified_region_buffers": VIEW,
    "unified_rope_region_buffers": VIEW,
    "get_contiguous_buf_infos": VIEW,
    "get_state_buf_infos": VIEW,
    "get_c128_state_buf_infos": VIEW,
    "get_request_state_buf_infos": VIEW,
    "get_unified_swa_ring_buf_infos": VIEW,
    "get_swa_valid_from_buf_infos": VIEW,
    "request_state_transfer_indices": VIEW,
    "get_key_buffer": UNIMPLEMENTED,
    "get_value_buffer": UNIMPLEMENTED,
    "get_kv_buffer": UNIMPLEMENTED,
    "set_kv_buffer": UNIMPLEMENTED,
    "wait_layer_transfer": GATE,
    "set_extra_key_buffer": SETTER,
    "set_extra_key_buffer_fused": SETTER,
    "set_index_k_fp4": SETTER,
    "set_index_k_fused": SETTER,
    "set_index_k_scale_buffer": SETTER,
    "set_swa_key_buffer": SETTER,
    "set_swa_key_buffer_radix": SETTER,
    "set_swa_key_buffer_radix_fused": SETTER,
    "set_swa_key_buffer_radix_fused_norm_rope": SETTER,
    "set_unified_key_buffer_radix_fused_norm_rope": SETTER,
    "set_swa_loc": SETTER,
    "set_swa_valid_from": SETTER,
    "register_mapping": SETTER,
    "clear_c128_req_state": SETTER,
    "clear_c4_req_states": SETTER,
    "clear_request_scoped_state": SETTER,
    "clear_unaccepted_c128_draft_states": SETTER,
    "compressed_kv_layout": META,
    "get_extra_key_bytes_per_token": META,
    "get_extra_key_layout": META,
    "get_extra_key_page_size": META,
    "get_index_k_page_size": META,
    "get_online_c128_mtp_max_draft_tokens": META,
    "get_online_c128_mtp_pending_seq_lens": META,
    "get_online_c128_mtp_state_slot_offset": META,
    "get_online_c128_state_num_req_slots": META,
    "get_ring_size": META,
    "get_swa_key_bytes_per_token": META,
    "get_swa_key_layout": META,
    "get_swa_key_page_size": META,
    "low_ratio_index_k_is_split": META,
    "low_ratio_index_k_page8": META,
    "low_ratio_index_k_page8_ratios": META,
    "pd_kv_layout": META,
    "source_layer_of": META,
    "translate_loc_from_full_to_swa": META,
}
ORDER = (INDEX_K, KV, STATE, VIEW, SETTER, UNIMPLEMENTED, GATE, META)
HOOK_OF = {m.name: m.hook for m in POOL_METHODS}


def methods(source: str) -> dict[str, bool]:
    """Public methods of the pool class -> whether the body calls ``self.wait_layer_transfer``."""
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == POOL_CLASS:
            out = {}
            for fn in node.body:
                if isinstance(fn, ast.FunctionDef) and not fn.name.startswith("_"):
                    out[fn.name] = any(
                        isinstance(c, ast.Call)
                        and isinstance(c.func, ast.Attribute)
                        and c.func.attr == "wait_layer_transfer"
                        and isinstance(c.func.value, ast.Name)
                        and c.func.value.id == "self"
                        for c in ast.walk(fn)
                    )
            return out
    raise LookupError(f"no {POOL_CLASS} in the source")


def scan(releases: tuple[str, ...] = RELEASES) -> dict[str, dict[str, bool]]:
    """release -> {method: gated}."""
    return {v: methods((release_dir(v) / POOL_FILE).read_text()) for v in releases}


def _ranges(versions: list[str]) -> str:
    """["0.5.12", "0.5.13", "0.5.15"] -> "0.5.12-0.5.13, 0.5.15" (over RELEASES' order)."""
    if not versions:
        return "none"
    index = [RELEASES.index(v) for v in versions]
    runs: list[list[int]] = []
    for i in index:
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    parts = [RELEASES[r[0]] if len(r) == 1 else f"{RELEASES[r[0]]}-{RELEASES[r[-1]]}" for r in runs]
    return ", ".join(parts)


def table(found: dict[str, dict[str, bool]]) -> str:
    """The markdown table: one row per method, grouped by category."""
    names = sorted({n for per in found.values() for n in per})
    rows = [
        "| accessor | kind | in releases | gated (wait_layer_transfer) in | probe hook |",
        "|---|---|---|---|---|",
    ]
    for category in ORDER:
        for name in (n for n in names if CATEGORY.get(n) == category):
            present = [v for v in found if name in found[v]]
            gated = [v for v in present if found[v][name]]
            hook = HOOK_OF.get(name, "")
            rows.append(
                f"| `{name}` | {category} | {_ranges(present)} | {_ranges(gated)} | "
                f"{f'`{hook}`' if hook else '-'} |"
            )
    return "\n".join(rows)


def main() -> None:
    print(table(scan()))


if __name__ == "__main__":
    sys.exit(main())
