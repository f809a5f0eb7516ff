"""A false-positive guard: realistic answers and well-formed calls that must all grade clean.

Generated from varied templates (deterministic seed): prose in many languages and scripts,
code in several languages, JSON, YAML, diffs, long shell commands, Markdown tables and lists,
thinking-mode answers, and tool calls of both grammar versions whose values carry code,
unicode and multi-line text. All text below was written for this corpus.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

from exporter.dsml import render_completion
from tests.dsml.builders import Case, tool

PROSE: dict[str, list[str]] = {
    "en": [
        "The cache keeps recently used pages in memory, so repeated reads of the same file are "
        "served without touching the disk. When memory runs low, the oldest pages are evicted.",
        "To reproduce the failure, start the server with two workers, send fifty concurrent "
        "requests, and watch the error rate climb after about thirty seconds.",
        "A good commit message says why the change was made; the diff already shows what changed.",
        "Short answer: yes, but only if the index fits in memory. Otherwise the planner falls back "
        "to a sequential scan, which is slower on large tables.",
        "I checked the logs from last night. The job failed at 02:14 because the credentials had "
        "expired; it retried three times and then gave up.",
    ],
    "zh": [
        "缓存会把最近使用的页面保存在内存中，因此对同一个文件的重复读取不需要访问磁盘。内存不足"
        "时，最旧的页面会被淘汰。",
        "要复现这个问题，请用两个 worker 启动服务器，发送五十个并发请求，大约三十秒后错误率就会"
        "上升。",
        "我看了一下昨晚的日志：任务在 02:14 失败，原因是凭证已经过期；它重试了三次后放弃了。",
        "简单来说：可以，但前提是索引能放进内存。否则查询计划会退回到顺序扫描，在大表上会更慢。",
    ],
    "ja": [
        "キャッシュは最近使ったページをメモリに保持するので、同じファイルを何度読んでもディスク"
        "にはアクセスしません。",
        "問題を再現するには、ワーカーを二つにしてサーバーを起動し、五十件の同時リクエストを送っ"
        "てください。",
        "昨夜のログを確認しました。認証情報の期限が切れていたため、ジョブは 2 時 14 分に失敗し"
        "ました。",
    ],
    "ko": [
        "캐시는 최근에 사용한 페이지를 메모리에 보관하므로 같은 파일을 반복해서 읽어도 디스크에"
        " 접근하지 않습니다.",
        "문제를 재현하려면 워커 두 개로 서버를 시작하고 동시 요청 오십 개를 보내세요.",
    ],
    "ru": [
        "Кэш хранит недавно использованные страницы в памяти, поэтому повторное чтение того же "
        "файла не обращается к диску. Когда памяти не хватает, самые старые страницы вытесняются.",
        "Чтобы воспроизвести ошибку, запустите сервер с двумя воркерами и отправьте пятьдесят "
        "одновременных запросов через curl.",
        "Я посмотрел вчерашние логи: задача упала в 02:14, потому что истёк срок действия токена.",
    ],
    "de": [
        "Der Cache hält kürzlich genutzte Seiten im Speicher, sodass wiederholte Lesezugriffe auf "
        "dieselbe Datei ohne Festplattenzugriff auskommen.",
        "Kurz gesagt: ja, aber nur, wenn der Index in den Arbeitsspeicher passt. Andernfalls fällt "
        "der Planer auf einen sequenziellen Scan zurück.",
    ],
    "fr": [
        "Le cache garde en mémoire les pages récemment utilisées : les lectures répétées du même "
        "fichier n'accèdent donc pas au disque. « Simple », dira-t-on — mais efficace.",
        "Pour reproduire l'erreur, démarrez le serveur avec deux workers et envoyez cinquante "
        "requêtes simultanées ; le taux d'erreur grimpe après trente secondes environ.",
    ],
    "es": [
        "La caché mantiene en memoria las páginas usadas recientemente, así que las lecturas "
        "repetidas del mismo archivo no tocan el disco. ¿Y si falta memoria? Se expulsan las más "
        "antiguas.",
        "Revisé los registros de anoche: la tarea falló a las 02:14 porque las credenciales habían "
        "caducado.",
    ],
    "pt": [
        "Para reproduzir a falha, inicie o servidor com dois workers e envie cinquenta requisições "
        "simultâneas; a taxa de erro sobe depois de uns trinta segundos. Não é difícil.",
    ],
    "pl": [
        "Pamięć podręczna przechowuje ostatnio używane strony, więc ponowne odczyty tego samego "
        "pliku nie sięgają dysku. Zażółć gęślą jaźń — to zdanie ma wszystkie polskie znaki.",
    ],
    "tr": [
        "Önbellek, son kullanılan sayfaları bellekte tutar; böylece aynı dosyanın tekrar "
        "okunması diske erişmeden yapılır. Bellek azaldığında en eski sayfalar çıkarılır.",
    ],
    "vi": [
        "Bộ nhớ đệm giữ các trang được dùng gần đây trong bộ nhớ, nên việc đọc lại cùng một tệp "
        "không cần truy cập đĩa. Khi thiếu bộ nhớ, các trang cũ nhất sẽ bị loại bỏ.",
    ],
    "ar": [
        "تحتفظ ذاكرة التخزين المؤقت بالصفحات المستخدمة مؤخرًا في الذاكرة، لذلك لا تحتاج القراءات "
        "المتكررة للملف نفسه إلى الوصول إلى القرص.",
        "لإعادة إنتاج المشكلة، شغّل الخادم مع عاملين وأرسل خمسين طلبًا متزامنًا.",
    ],
    "he": [
        "המטמון שומר בזיכרון דפים שנעשה בהם שימוש לאחרונה, ולכן קריאות חוזרות של אותו קובץ אינן "
        "ניגשות לדיסק.",
    ],
    "hi": [
        "कैश हाल ही में उपयोग किए गए पेजों को मेमोरी में रखता है, इसलिए एक ही फ़ाइल को दोबारा प"
        "ढ़ने "
        "पर डिस्क तक नहीं जाना पड़ता।",
    ],
    "th": [
        "แคชเก็บหน้าที่ใช้ล่าสุดไว้ในหน่วยความจำ ดังนั้นการอ่านไฟล์เดิมซ้ำจึงไม่ต้องเข้าถึงดิสก์",
    ],
    "el": [
        "Η κρυφή μνήμη κρατά τις σελίδες που χρησιμοποιήθηκαν πρόσφατα, έτσι οι επαναλαμβανόμενες "
        "αναγνώσεις του ίδιου αρχείου δεν αγγίζουν τον δίσκο.",
    ],
    "uk": [
        "Кеш зберігає нещодавно використані сторінки в пам'яті, тож повторне читання того самого "
        "файлу не звертається до диска. Ґанок, їжак і є — усе на місці.",
    ],
}

CODE: dict[str, str] = {
    "python": (
        "def load(path: str) -> dict[str, str]:\n"
        '    """Parse KEY=VALUE lines, skipping comments."""\n'
        "    out: dict[str, str] = {}\n"
        '    with open(path, encoding="utf-8") as fh:\n'
        "        for line in fh:\n"
        '            if not line.strip() or line.startswith("#"):\n'
        "                continue\n"
        '            key, _, value = line.partition("=")\n'
        "            out[key.strip()] = value.strip()\n"
        "    return out\n"
    ),
    "javascript": (
        "export async function fetchAll(urls) {\n"
        "  const results = await Promise.allSettled(urls.map((u) => fetch(u)));\n"
        "  return results.filter((r) => r.status === 'fulfilled').map((r) => r.value);\n"
        "}\n"
    ),
    "go": (
        "func (s *Server) Handle(w http.ResponseWriter, r *http.Request) {\n"
        "\tif r.Method != http.MethodPost {\n"
        '\t\thttp.Error(w, "method not allowed", http.StatusMethodNotAllowed)\n'
        "\t\treturn\n"
        "\t}\n"
        "\tdefer r.Body.Close()\n"
        "}\n"
    ),
    "rust": (
        "fn parse(input: &str) -> Result<Vec<u32>, ParseIntError> {\n"
        "    input.split(',').map(|s| s.trim().parse::<u32>()).collect()\n"
        "}\n"
    ),
    "sql": (
        "SELECT u.id, u.email, COUNT(o.id) AS orders\n"
        "FROM users AS u\n"
        "LEFT JOIN orders AS o ON o.user_id = u.id AND o.created_at >= NOW() - INTERVAL '30 days'\n"
        "GROUP BY u.id, u.email\n"
        "HAVING COUNT(o.id) > 3\n"
        "ORDER BY orders DESC;\n"
    ),
    "bash": (
        "#!/usr/bin/env bash\n"
        "set -euo pipefail\n"
        'for f in "$@"; do\n'
        '  [[ -f "$f" ]] || { echo "missing: $f" >&2; exit 1; }\n'
        "  sha256sum \"$f\" | awk '{print $1}'\n"
        "done\n"
    ),
    "html": (
        '<form method="post" action="/login">\n'
        '  <label for="user">User</label> <input id="user" name="user" required>\n'
        '  <button type="submit">Sign in &rarr;</button>\n'
        "</form>\n"
    ),
    "c": (
        "static int clamp(int v, int lo, int hi) {\n"
        "    return v < lo ? lo : (v > hi ? hi : v);\n"
        "}\n"
        "/* ================================================================ */\n"
    ),
    "regex": (
        'EMAIL = re.compile(r"^[\\w.+-]+@[\\w-]+\\.[\\w.-]+$")\n'
        'DATE = re.compile(r"(\\d{4})-(\\d{2})-(\\d{2})")\n'
    ),
}

STRUCTURED: list[str] = [
    json.dumps(
        {"name": "svc", "replicas": 3, "ports": [80, 443], "env": {"LOG": "debug", "TZ": "UTC"}},
        indent=2,
    ),
    "server:\n  host: 0.0.0.0\n  port: 8080\n  tls:\n    enabled: true\n    cert: /etc/ssl/a.pem\n",
    "--- a/app.py\n+++ b/app.py\n@@ -10,7 +10,8 @@ def main():\n-    run(debug=True)\n"
    "+    config = load('app.env')\n+    run(debug=config.get('DEBUG') == '1')\n     return 0\n",
    "| Metric | Before | After |\n|:-------|-------:|------:|\n| p50 ms | 12.4 | 9.8 |\n"
    "| p99 ms | 88.0 | 41.5 |\n| errors | 0.8% | 0.1% |\n",
    "1. Stop the service.\n2. Back up `/var/lib/app` (about 2 GB).\n3. Run the migration.\n"
    "4. Start the service and check `/healthz`.\n",
    'docker run --rm -it -v "$PWD":/work -w /work -e PYTHONUNBUFFERED=1 --network host '
    "--gpus all python:3.11-slim bash -lc 'pip install -r requirements.txt && pytest -q -x "
    "--maxfail=1 tests/ | tee /tmp/test.log'",
    "Progress: [##########----------] 50%\nETA 00:01:12 ... downloading shards 3/6",
    "Math: let f(x) = αx² + βx + γ with α ≠ 0; then x* = −β / (2α) and f(x*) ≤ f(x) ∀x if α > 0.",
    "Emoji status: ✅ build, ✅ tests, ⚠️ lint (2 warnings), ❌ deploy 🚀 pending",
    "C:\\Users\\dev\\AppData\\Local\\Temp\\build-4711\\out\\Release\\app.exe --config=..\\cfg.ini",
    "0x7f3a2c001000-0x7f3a2c021000 rw-p 00000000 00:00 0  [heap]\n"
    "0x7ffd5e8a1000-0x7ffd5e8c2000 rw-p 00000000 00:00 0  [stack]",
    "#####################\n#  build complete   #\n#####################",
    "id,name,score\n1,Ana,91\n2,Bo,78\n3,Chen,85\n4,Dara,91\n5,Eli,66\n",
]

TOOLS = [
    tool("read_file", ("path",), path="string", offset="integer", limit="integer"),
    tool("write_file", ("path", "content"), path="string", content="string"),
    tool("run_shell", ("command",), command="string", timeout="number", cwd="string"),
    tool("search", ("query",), query="string", max_results="integer", lang="string"),
    tool("http_request", ("url",), url="string", method="string", headers="object", body="string"),
    tool("get_weather", ("city",), city="string", units="string"),
    tool("sql_query", ("sql",), sql="string", params="array"),
    tool("edit_file", ("path", "diff"), path="string", diff="string"),
    tool("list_tasks", ()),
    tool("set_flags", ("flags",), flags="object", dry_run="boolean"),
]


def _prose(rng: random.Random, lang: str | None = None, n: int = 2) -> str:
    lang = lang or rng.choice(sorted(PROSE))
    return " ".join(rng.sample(PROSE[lang], min(n, len(PROSE[lang]))))


def _fenced(rng: random.Random) -> str:
    lang = rng.choice(sorted(CODE))
    return f"```{lang}\n{CODE[lang]}```"


def _answer(rng: random.Random) -> str:
    parts = [_prose(rng)]
    for _ in range(rng.randint(0, 3)):
        kind = rng.random()
        if kind < 0.4:
            parts.append(_fenced(rng))
        elif kind < 0.7:
            parts.append(rng.choice(STRUCTURED))
        else:
            parts.append(_prose(rng, n=1))
    return "\n\n".join(parts)


def _args(rng: random.Random, name: str) -> dict[str, Any]:
    lang = rng.choice(sorted(CODE))
    paths = ["src/app.py", "配置/设置.yaml", "docs/README.md", "/tmp/x y/z.txt", "C:\\tmp\\a.ini"]
    table: dict[str, dict[str, Any]] = {
        "read_file": {"path": rng.choice(paths), "offset": rng.randint(0, 500), "limit": 200},
        "write_file": {"path": rng.choice(paths), "content": CODE[lang]},
        "run_shell": {"command": STRUCTURED[5], "timeout": 120.5, "cwd": "/work"},
        "search": {"query": _prose(rng, n=1)[:80], "max_results": 5, "lang": "zh-CN"},
        "http_request": {
            "url": "https://api.example.com/v1/items?q=caf%C3%A9&limit=10",
            "method": "POST",
            "headers": {"Content-Type": "application/json", "X-Trace": "a1b2"},
            "body": json.dumps({"name": "ü-ß-東京", "tags": ["x", "y"]}, ensure_ascii=False),
        },
        "get_weather": {"city": rng.choice(["東京", "München", "São Paulo", "Київ", "القاهرة"])},
        "sql_query": {"sql": CODE["sql"], "params": [1, "two", None, 3.5, True]},
        "edit_file": {"path": "app.py", "diff": STRUCTURED[2]},
        "list_tasks": {},
        "set_flags": {
            "flags": {"beta": True, "limit": 10, "nested": {"a": [1, 2]}},
            "dry_run": False,
        },
    }
    args = table[name]
    keys = list(args)
    required = {
        "read_file": 1,
        "write_file": 2,
        "run_shell": 1,
        "search": 1,
        "http_request": 1,
        "get_weather": 1,
        "sql_query": 1,
        "edit_file": 2,
        "set_flags": 1,
    }.get(name, 0)
    keep = keys[:required] + [k for k in keys[required:] if rng.random() < 0.6]
    return {k: args[k] for k in keep}


def corpus(seed: int = 20240611) -> Iterator[Case]:
    """About 460 cases: answers, thinking answers, raw calls (all three dialects), OpenAI shapes."""
    rng = random.Random(seed)
    names = [t["function"]["name"] for t in TOOLS]
    for i in range(120):
        yield Case(
            f"answer-{i}", _answer(rng), kwargs={"finish_reason": "stop"}, verdict="no_tool_call"
        )
    for i in range(60):
        text = render_completion(_answer(rng), reasoning=_prose(rng, n=3), eos=rng.random() < 0.5)
        yield Case(
            f"thinking-{i}",
            text,
            kwargs={"finish_reason": "stop", "thinking": True},
            verdict="no_tool_call",
        )
    for i in range(160):
        grammar = "v4" if i % 3 else "v3.2"
        calls = [(n, _args(rng, n)) for n in rng.sample(names, rng.randint(1, 3))]
        content = _prose(rng, n=1) if rng.random() < 0.7 else ""
        reasoning = _prose(rng, n=2) if rng.random() < 0.5 else None
        text = render_completion(
            content,
            calls,
            reasoning=reasoning,
            grammar=grammar,
            eos=rng.random() < 0.5,
            self_closing=grammar == "v4" and rng.random() < 0.5,
        )
        kwargs: dict[str, Any] = {"finish_reason": "stop", "tools": TOOLS}
        if rng.random() < 0.5:
            kwargs["grammar"] = grammar
        if reasoning is not None and rng.random() < 0.5:
            kwargs["thinking"] = True
        yield Case(f"call-{grammar}-{i}", text, kwargs=kwargs, verdict="well_formed")
    for i in range(60):
        calls = [(n, _args(rng, n)) for n in rng.sample(names, rng.randint(1, 2))]
        message: dict[str, Any] = {
            "role": "assistant",
            "content": _prose(rng, n=1),
            "reasoning_content": _prose(rng, n=2),
            "tool_calls": [
                {
                    "id": f"c{j}",
                    "type": "function",
                    "function": {"name": n, "arguments": json.dumps(a, ensure_ascii=False)},
                }
                for j, (n, a) in enumerate(calls)
            ],
        }
        response = {
            "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
        }
        yield Case(f"openai-{i}", response=response, kwargs={"tools": TOOLS}, verdict="well_formed")
    for i in range(60):  # V4.1 (spaced tags), graded with the dialect known or from the block
        calls = [(n, _args(rng, n)) for n in rng.sample(names, rng.randint(1, 3))]
        text = render_completion(
            _prose(rng, n=1) if rng.random() < 0.7 else "",
            calls,
            reasoning=_prose(rng, n=2) if rng.random() < 0.5 else None,
            grammar="v4.1",
            eos=rng.random() < 0.5,
            self_closing=rng.random() < 0.5,
        )
        kwargs = {"finish_reason": "stop", "tools": TOOLS}
        if i % 2:
            kwargs["grammar"] = "v4.1"
        yield Case(f"call-v4.1-{i}", text, kwargs=kwargs, verdict="well_formed")
