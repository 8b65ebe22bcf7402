"""Text corpora for token-count benchmarks and tests, built offline.

* ``prose``: English prose paragraphs from CPython's own documentation
  (``pydoc_data.topics``, shipped with every Python), code blocks dropped.
* ``code``: Python source from the standard library.
* ``cjk``: Chinese, Japanese and Korean sentences written for this project,
  shuffled with a fixed seed into paragraphs of one language each.
* ``docs``: the same documentation whole: prose, grammar, tables and code
  examples mixed, the hardest case for sampling.

Each corpus is deterministic, so estimates and their errors are repeatable.
"""

from __future__ import annotations

import random
import re
import sysconfig
from functools import cache
from pathlib import Path

__all__ = ("CORPORA", "corpus", "slice_tokens")

_CHINESE = (
    "大型语言模型的服务需要明确的服务水平目标，而不仅仅是更高的吞吐量。",
    "如果所有请求共用同一个队列，一份五万字的合同就会让所有聊天用户的首字延迟上升好几秒。",
    "准入控制应该在请求进入队列之前估算它的成本，包括提示词长度和最大输出长度。",
    "公平并不意味着对所有请求一视同仁，高级交互产品可以比离线导出任务获得更好的延迟保证。",
    "当显存中的键值缓存接近耗尽时，应该先缩短输出长度，再暂停后台任务，而不是等到内存溢出。",
    "运维团队最需要的往往是很朴素的指标：每条通道的排队时间、提示词长度分布和每个租户的并发数。",
    "今天下午我们在会议室讨论了下一个季度的发布计划，大家都同意先修复稳定性问题。",
    "图书馆的新馆位于河边，周末常常有很多家长带着孩子来借阅绘本。",
    "这座城市的地铁系统在过去十年里扩展了三倍，通勤时间明显缩短。",
    "如果首字延迟变差而每个输出令牌的时间正常，首先应该怀疑排队或者预填充的干扰。",
    "批处理工作流更关心吞吐量、清空队列所需的时间以及成本效率。",
    "回退阶梯的第一步是关闭可选的昂贵功能，例如多次采样和很长的推理过程。",
)
_JAPANESE = (
    "大規模言語モデルのサービスでは、スループットよりも先にサービス目標を定義するべきです。",
    "長いプロンプトが短い対話の前に並ぶと、すべての利用者の最初のトークンまでの時間が延びてしまいます。",
    "受付制御は、リクエストがキューに入る前にそのコストを見積もる仕組みです。",
    "キーバリューキャッシュが足りなくなる前に、出力の上限を下げて背景処理を一時停止します。",
    "東京の天気は晴れで、午後の気温は二十度まで上がる見込みです。",
    "この図書館には古い地図や手紙がたくさん保存されていて、研究者がよく訪れます。",
    "新しい駅ができてから、商店街には若い人たちが集まるようになりました。",
    "障害が起きたときは、まずレーンごとの待ち時間とテナントごとの同時実行数を確認しましょう。",
    "公平性とは、すべての要求を同じように扱うことではなく、方針を明示して予測可能にすることです。",
    "バッチ処理では、最初の応答時間よりもキューを空にするまでの時間が重要になります。",
)
_KOREAN = (
    "서빙 정책은 혼합 트래픽에서도 서비스가 믿을 만한 제품처럼 동작하게 만듭니다.",
    "긴 프롬프트와 짧은 채팅 요청을 같은 큐 규칙으로 경쟁시키면 꼬리 지연 시간이 쉽게 무너집니다.",
    "요청이 시스템을 망가뜨리기 전에 비용을 대략이라도 추정하는 것이 핵심입니다.",
    "키값 캐시가 부족해지면 메모리 부족 오류를 내기 전에 출력 길이를 줄이는 편이 낫습니다.",
    "오늘 아침에는 비가 내렸지만 오후에는 날씨가 맑아져서 공원에 사람들이 많았습니다.",
    "우리 동네 도서관은 주말마다 어린이를 위한 그림책 읽기 행사를 엽니다.",
    "장애 대응은 레인별 대기 시간과 테넌트별 동시성 같은 운영 지표에서 시작합니다.",
    "공정성은 모든 요청을 똑같이 대하는 것이 아니라 정책을 명시적이고 "
    "예측 가능하게 만드는 것입니다.",
    "배치 작업은 처리량과 큐를 비우는 시간, 비용 효율이 더 중요합니다.",
    "폴백 단계는 하드 장애가 나기 전에 순서대로 발동해야 합니다.",
)


def _docs() -> str:
    import pydoc_data.topics

    return "\n\n".join(pydoc_data.topics.topics[key] for key in sorted(pydoc_data.topics.topics))


def _prose() -> str:
    paragraphs = []
    for block in re.split(r"\n\s*\n", _docs()):
        lines = [line for line in block.split("\n") if line.strip()]
        text = " ".join(line.strip() for line in lines)
        if len(text) < 200 or "::=" in text or ">>>" in text:
            continue
        indents = [len(line) - len(line.lstrip()) for line in lines]
        wordy = sum(char.isalpha() or char == " " for char in text) / len(text)
        if wordy >= 0.9 and max(indents) - min(indents) <= 4:
            paragraphs.append(text)
    return "\n\n".join(paragraphs)


def _code() -> str:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(stdlib.glob("*.py"))
    return "\n\n".join(path.read_text(encoding="utf-8", errors="replace") for path in files)


def _cjk() -> str:
    rng = random.Random(2024)
    paragraphs = []
    for _ in range(3000):
        sentences = rng.choice((_CHINESE, _JAPANESE, _KOREAN))
        paragraphs.append("".join(rng.choice(sentences) for _ in range(rng.randint(3, 8))))
    return "\n".join(paragraphs)


CORPORA = ("prose", "code", "cjk", "docs")


@cache
def corpus(name: str) -> str:
    """The full text of corpus ``name`` (one of :data:`CORPORA`)."""
    return {"prose": _prose, "code": _code, "cjk": _cjk, "docs": _docs}[name]()


def slice_tokens(name: str, tokens: int, count: object, *, start: float = 0.1) -> str:
    """About ``tokens`` tokens of corpus ``name`` starting at fraction ``start``,
    repeating the corpus when it is too short. ``count(text) -> int`` measures."""
    assert callable(count)
    text = corpus(name)
    begin = int(len(text) * start)
    sample = text[begin : begin + 20_000]
    chars_per_token = len(sample) / max(1, count(sample))
    want = int(tokens * chars_per_token)
    while len(text) - begin < want:
        text += "\n\n" + text
    return text[begin : begin + want]
