"""Which language a text is in, cheaply, and how each language's words are matched.

Detection reads the script of the letters first (Han, kana, Hangul, Thai, Cyrillic, Greek, Arabic, ...)
and, for Latin script, counts function words and letters only one language uses (ñ, ã, ß, ș, ğ, Vietnamese
tone marks). No evidence means English, the language the analyzer has always assumed. It costs a few
microseconds a text and needs no model, so every memory and every query is detected.

A language gets a Snowball stemmer (PyStemmer) and stop words where it has them; text in a script written
without spaces (Chinese, Japanese, Korean, Thai, Lao, Burmese, Khmer) is cut into overlapping pairs of
characters instead.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from functools import lru_cache

DEFAULT = "en"

# Snowball's algorithm for each language code the detector can answer.
STEMMERS = {
    "en": "english",
    "es": "spanish",
    "pt": "portuguese",
    "fr": "french",
    "de": "german",
    "it": "italian",
    "nl": "dutch",
    "ro": "romanian",
    "tr": "turkish",
    "ru": "russian",
    "sv": "swedish",
    "id": "indonesian",
    "el": "greek",
    "ar": "arabic",
    "hi": "hindi",
}

# English function words (a superset of the common NLTK list, plus the pure function words of scikit-learn's):
# content words some lists include ("fire", "name", "first", ...) are kept, since people talk about them;
# contraction fragments ("don't" -> "don", "t") are listed; "may" is kept (the month in rendered dates).
STOP_WORDS: frozenset[str] = frozenset(
    """
    a about above across after afterwards again against all almost along already also although always am
    among amongst an and another any anyhow anyone anything anyway anywhere are aren around as at be
    became because become becomes becoming been before beforehand being below beside besides between
    beyond both but by can cannot cant could couldn couldnt d did didn do does doesn doing don done down
    during each eg either else elsewhere enough etc even ever every everyone everything everywhere except
    few for from further had hadn has hasn hasnt have haven having he hence her here hereafter hereby
    herein hereupon hers herself him himself his how however i ie if in indeed into is isn it its itself
    just ll m ma many me meanwhile might mightn more moreover most mostly much must mustn my myself
    namely needn neither nevertheless no nobody none noone nor not nothing now nowhere o of off often on
    once only onto or other others otherwise our ours ourselves out over own per perhaps rather re s same
    shan she should shouldn since so some somehow someone something sometime sometimes somewhere still
    such t than that the their theirs them themselves then thence there thereafter thereby therefore
    therein thereupon these they this those though through throughout thru thus to together too toward
    towards under until up upon us ve very via was wasn we were weren what whatever when whence whenever
    where whereafter whereas whereby wherein whereupon wherever whether which while whither who whoever
    whom whose why will with within without won would wouldn y yet you your yours yourself yourselves
    """.split()
)

# The most frequent function words of each language (from Snowball's stop lists where it has one, cut to the
# words that are not also ordinary words elsewhere). They are removed before matching, and in Latin script
# they are the evidence detection counts.
_FUNCTION_WORDS = {
    "es": """
        de la que el en y a los del se las por un para con no una su al lo como más pero sus le ya este sí
        porque esta entre cuando muy sin sobre también me hasta hay donde quien desde todo nos durante todos
        uno les ni contra otros ese eso ante ellos e esto mí antes algunos qué unos yo otro otras otra él
        tanto esa estos mucho quienes nada muchos cual poco ella estar estas algunas algo nosotros mi mis tú
        te ti tu tus ellas nosotras vosotros vosotras os mío mía míos mías tuyo tuya suyo suya nuestro
        nuestra vuestro es son fue era eran ha han había está están estaba cuál cuáles cuándo dónde cómo
        cuánto cuántos quién quiénes hace hizo tiene tenía""",
    "pt": """
        de a o que e do da em um para é com não uma os no se na por mais as dos como mas foi ao ele das tem
        à seu sua ou ser quando muito há nos já está eu também só pelo pela até isso ela entre era depois
        sem mesmo aos ter seus quem nas me esse eles estão você tinha foram essa num nem suas meu às minha
        têm numa pelos elas havia seja qual será nós tenho lhe deles essas esses pelas este fosse dele tu
        te vocês vos lhes meus minhas teu tua teus tuas nosso nossa nossos nossas dela delas esta estes
        estas aquele aquela aqueles aquelas isto aquilo estava são qual quais quando onde como quanto
        quantos quanta quantas porque sobre""",
    "fr": """
        au aux avec ce ces dans de des du elle en et eux il je la le les leur lui ma mais me même mes moi
        mon ne nos notre nous on ou par pas pour qu que qui sa se ses son sur ta te tes toi ton tu un une
        vos votre vous est sont était été être avoir ont avait cette cet quel quelle quels quelles où
        comment quand pourquoi combien""",
    "de": """
        aber alle allem allen aller alles als also am an ander andere anderem anderen anderer anderes auch
        auf aus bei bin bis bist da damit dann der den des dem die das dass daß derselbe dich dir du dies
        diese diesem diesen dieser dieses doch dort durch ein eine einem einen einer eines einig einige
        einmal er ihn ihm es etwas euer eure für gegen gewesen hab habe haben hat hatte hatten hier hin
        hinter ich mich mir ihr ihre ihrem ihren ihrer ihres im in indem ins ist jede jedem jeden jeder
        jedes jene jenem jenen jener jenes jetzt kann kein keine keinem keinen keiner keines können könnte
        machen man manche mein meine meinem meinen meiner meines mit muss musste nach nicht nichts noch nun
        nur ob oder ohne sehr sein seine seinem seinen seiner seines selbst sich sie sind so solche soll
        sollte sondern sonst über um und uns unsere unter viel vom von vor während war waren warst was
        weg weil weiter welche welchem welchen welcher welches wenn werde werden wie wieder will wir wird
        wirst wo wollen wollte würde würden zu zum zur zwar zwischen wer wen wem wessen wann warum wieviel
        wieso weshalb woher wohin womit wofür worauf woran worüber wovon wozu wurde wurden""",
    "it": """
        ad al allo ai agli all agl alla alle con col coi da dal dallo dai dagli dall dagl dalla dalle di
        del dello dei degli dell degl della delle in nel nello nei negli nell negl nella nelle su sul sullo
        sui sugli sull sugl sulla sulle per tra contro io tu lui lei noi voi loro mio mia miei mie tuo tua
        tuoi tue suo sua suoi sue nostro nostra nostri nostre vostro vostra vostri vostre mi ti ci vi lo
        gli la le li ne il un uno una ma ed se perché anche come dov dove che chi cui non più quale quanto
        quanti quanta quante quello quelli quella quelle questo questi questa queste si tutto tutti è sono
        era erano stato stata ha hanno aveva quando""",
    "nl": """
        de en van ik te dat die in een hij het niet zijn is was op aan met als voor had er maar om hem dan
        zou of wat mijn men dit zo door over ze zich bij ook tot je mij uit der daar haar naar heb hoe heeft
        hebben deze u want nog zal me zij nu ge geen omdat iets worden toch al waren veel meer doen toen
        moet ben zonder kan hun dus alles onder ja eens hier wie werd altijd doch wordt wezen kunnen ons
        zelf tegen na reeds wil kon niets uw iemand geweest andere waar wanneer waarom""",
    "ro": """
        și în la cu de pe din că care un o este sunt a al ai ale lui ei lor pentru nu se să mai sau dar
        fost fi fie cel cea cei cele acest această acești aceste acel acea acei acele ce cine când unde
        cum cât câți am ai are au avea eu tu el ea noi voi ele mă îmi meu mea mei mele tău ta său sa
        nostru noastră vostru""",
    "tr": """
        ve bir bu da de için ile ne o şu ben sen biz siz onlar mi mı mu mü çok daha gibi kadar ama ya
        veya ki en her hiç şey nasıl neden niçin nerede ne zaman kim hangi olan olarak oldu olduğu değil
        var yok ise""",
    "sv": """
        och det att i en jag hon som han på den med var sig för så till är men ett om hade de av icke mig
        du henne då sin nu har inte hans honom skulle hennes där min man ej vid kunde något från ut när
        efter upp vi dem vara vad över än dig kan sina här ha mot alla under någon eller allt mycket sedan
        ju denna själv detta åt utan varit hur ingen mitt ni bli blev oss din dessa några deras blir mina
        samma vilken er sådan vår blivit dess inom mellan sådant varför varje vilka ditt vem vilket""",
    "id": """
        yang dan di ini itu dengan untuk tidak dari dalam akan pada juga ke karena ada atau saya kami kita
        mereka dia ia adalah sudah telah oleh bisa dapat hanya seperti lebih bahwa jika apa siapa kapan
        mana bagaimana mengapa berapa""",
    "vi": """
        của và là có được trong cho những các một với này đã không người khi để từ như về cũng đến nhiều
        thì ra nào năm sau theo vào lại trên đó còn bị nhưng rằng nếu hay mà tại vì đang sẽ rất nên ai gì
        đâu bao nhiêu sao""",
    "ru": """
        и в во не что он на я с со как а то все она так его но да ты к у же вы за бы по только ее мне было
        вот от меня еще нет о из ему теперь когда даже ну вдруг ли если уже или ни быть был него до вас
        нибудь опять уж вам ведь там потом себя ничего ей может они тут где есть надо ней для мы тебя их
        чем была сам чтоб без будто чего раз тоже себе под будет ж тогда кто этот того потому этого какой
        совсем ним здесь этом один почти мой тем чтобы нее сейчас были куда зачем всех никогда можно при
        наконец два об другой хоть после над больше тот через эти нас про всего них какая много разве три
        эту моя впрочем хорошо свою этой перед иногда лучше чуть том нельзя такой им более всегда конечно
        всю между сколько""",
    "el": """
        ο η το οι τα του της των τον την τους τις και να σε με για από που είναι ήταν ότι θα δεν δε μη μην
        ένα ένας μια μία ενός μιας στο στη στην στον στα στους στις στου στης αλλά ή όπως ως ποιος ποια
        ποιο ποιοι ποιες ποιου ποιας ποιον ποιους τι πότε πού πώς πόσο πόσα πόσοι πόσες γιατί αυτός αυτή
        αυτό αυτοί αυτές αυτά αυτού αυτής αυτών αυτόν αυτήν επίσης έχει είχε έχουν είχαν""",
    "ar": """
        في من على إلى الى عن مع هذا هذه ذلك تلك التي الذي الذين هو هي هم هن كان كانت يكون أن إن أنه أو و
        ثم ما ماذا متى أين كيف لماذا كم هل لا لم لن قد بين عند كل بعد قبل حتى منذ أي""",
    "hi": """
        का के की है हैं था थे थी में से को और पर यह वह ये वे एक भी तो ही लिए किया कर कि जो क्या कब कहाँ
        कहां कैसे कौन किस किसने किसे कितना कितने कितनी नहीं ने या इस उस इन उन अपने अपना अपनी हो होता
        होती होते गया गई गए""",
}
FUNCTION_WORDS: dict[str, frozenset[str]] = {
    DEFAULT: STOP_WORDS,
    **{language: frozenset(words.split()) for language, words in _FUNCTION_WORDS.items()},
}

# Letters that, among the Latin-script languages detected here, mostly one of them writes: each counts as
# much as a function word (ä, ö, ü are also Swedish or Turkish, which have letters of their own).
_LETTERS = {
    "es": "ñ¿¡",
    "pt": "ãõ",
    "de": "ßäöü",
    "ro": "șțşţ",
    "tr": "ığ",
    "sv": "å",
    "vi": "ăđơưạảấầẩẫậắằẳẵặẹẻẽếềểễệỉịọỏốồổỗộớờởỡợụủứừửữựỳỵỷỹ",
}
_LETTER_LANGUAGE = {letter: lang for lang, letters in _LETTERS.items() for letter in letters}

# Scripts written without spaces between words: their runs are cut into overlapping character pairs (kana, Han,
# Hangul, Thai, Lao, Myanmar, Khmer).
_UNSPACED = (
    "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af\u0e00-\u0e7f\u0e80-\u0eff\u1100-\u11ff"
    "\u1000-\u109f\u1780-\u17ff"
)
UNSPACED_RUN = re.compile(f"[{_UNSPACED}]+")


def _mark_ranges() -> str:
    """A character class body of the combining marks (Unicode categories M*) outside the unspaced scripts: the
    vowel signs of Devanagari and other Indic scripts, Arabic's vowel marks, the accents of decomposed Latin.
    They are inside words, though a regular expression's `\\w` does not match them."""
    ranges: list[tuple[int, int]] = []
    for code in range(0x300, 0x10000):
        char = chr(code)
        if unicodedata.category(char)[0] != "M" or UNSPACED_RUN.match(char):
            continue
        if ranges and ranges[-1][1] == code - 1:
            ranges[-1] = (ranges[-1][0], code)
        else:
            ranges.append((code, code))
    return "".join(chr(a) if a == b else f"{chr(a)}-{chr(b)}" for a, b in ranges)


MARKS = _mark_ranges()
# A word: a word character of a spaced script and what follows it of those and of combining marks, or a run of
# an unspaced script.
WORD = re.compile(f"[{_UNSPACED}]+|[^\\W{_UNSPACED}](?:[^\\W{_UNSPACED}]|[{MARKS}])*")
# The scripts written without spaces that are one language's, and the other scripts, by the first word of their
# Unicode character names.
_UNSPACED_LANGUAGES = {"HANGUL": "ko", "THAI": "th", "LAO": "lo", "MYANMAR": "my", "KHMER": "km"}
_SCRIPTS = {"CYRILLIC": "ru", "GREEK": "el", "ARABIC": "ar", "DEVANAGARI": "hi", "HEBREW": "he"}
_UKRAINIAN = frozenset("іїєґ")


def folded(text: str) -> str:
    """`text` composed (NFC: an accent typed apart from its letter is the letter its language's stemmer knows) and
    lowercased, with the dot that lowercasing a Turkish capital İ leaves on its i removed ("İstanbul" is
    "istanbul")."""
    return unicodedata.normalize("NFC", text).lower().replace("i\u0307", "i")


def detect(text: str) -> str:
    """The language code of `text`: the script its letters are mostly written in, then, for Latin script,
    the language whose function words and letters occur most (English when nothing tells)."""
    return _detect(text)[0]


def query_languages(text: str) -> tuple[str, ...]:
    """The languages a query's words are matched in: its own, or English and the language a single word of
    it points to (a short question says little: "Welche Auszeichnung erhielt sie?" has one German function
    word, "see ya" one Spanish one)."""
    language, hint = _detect(text)
    return (language,) if hint is None or hint == language else (language, hint)


def _detect(text: str) -> tuple[str, str | None]:
    """(language, a weaker candidate or None)."""
    text = folded(text)
    if not text.isascii():
        script = _non_latin_language(text)
        if script is not None:
            return script, None
    return _latin_language(text)


def _non_latin_language(lowered: str) -> str | None:
    """The language of the script a quarter or more of the letters are written in, when that is not Latin:
    names and terms in Latin letters are common in such text, the reverse is not."""
    letters = [c for c in lowered if c.isalpha() and not c.isascii()]
    if not letters:
        return None
    total = sum(1 for c in lowered if c.isalpha())
    scripts = Counter(_script(c) for c in letters)
    script, count = scripts.most_common(1)[0]
    if script in ("LATIN", "") or count * 4 < total:
        return None
    if script in ("CJK", "HIRAGANA", "KATAKANA", *_UNSPACED_LANGUAGES):
        if scripts["HIRAGANA"] or scripts["KATAKANA"]:
            return "ja"
        return _UNSPACED_LANGUAGES.get(script, "zh")
    language = _SCRIPTS.get(script, DEFAULT)
    return "uk" if language == "ru" and any(c in _UKRAINIAN for c in letters) else language


@lru_cache(maxsize=8192)
def _script(char: str) -> str:
    name = unicodedata.name(char, "")
    return name.split(" ", 1)[0] if name else ""


def _latin_language(lowered: str) -> tuple[str, str | None]:
    votes: Counter[str] = Counter()
    # Each distinct word and letter votes once: a name repeated ("Los Angeles") is not a language.
    for word in set(WORD.findall(lowered)):
        votes.update(_WORD_LANGUAGES.get(word, ()))
    if not lowered.isascii():
        votes.update(_LETTER_LANGUAGE[char] for char in set(lowered) if char in _LETTER_LANGUAGE)
    if not votes:
        return DEFAULT, None
    best, count = votes.most_common(1)[0]
    if votes[DEFAULT] >= count:  # a tie with English keeps English (short texts share "a", "in", "die")
        return DEFAULT, None
    # A single word of another language ("see ya", "take care") is a hint, not a language.
    return (best, None) if count >= 2 else (DEFAULT, best)


def _word_languages() -> dict[str, tuple[str, ...]]:
    languages: dict[str, list[str]] = {}
    for language, words in FUNCTION_WORDS.items():
        for word in words:
            languages.setdefault(word, []).append(language)
    return {word: tuple(found) for word, found in languages.items()}


_WORD_LANGUAGES = _word_languages()
