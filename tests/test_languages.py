"""The lexical side in each language: which language a text is in, and the terms its words become."""

import unicodedata

import pytest

from memory_server.ranking.expansion import vocabulary_words
from memory_server.ranking.languages import detect, query_languages
from memory_server.ranking.lexical import analyze, analyze_query


@pytest.mark.parametrize(
    ("text", "language"),
    [
        ("We moved the launch to Friday after the review.", "en"),
        ("La reunión con el equipo de ventas es el martes por la mañana.", "es"),
        ("A avaliação do acadêmico é feita pelo colegiado do curso.", "pt"),
        ("Die Besprechung mit dem Team findet am Dienstag statt.", "de"),
        ("Встреча с командой продаж состоится во вторник.", "ru"),
        ("Cuộc họp với nhóm bán hàng diễn ra vào thứ Ba.", "vi"),
        ("与销售团队的会议在星期二举行。", "zh"),
        ("営業チームとの会議は火曜日です。", "ja"),
        ("การประชุมกับทีมขายจะจัดขึ้นในวันอังคาร", "th"),
        ("កិច្ចប្រជុំជាមួយក្រុមលក់គឺនៅថ្ងៃអង្គារ", "km"),
        ("အရောင်းအဖွဲ့နှင့် အစည်းအဝေးသည် အင်္ဂါနေ့တွင်ဖြစ်သည်", "my"),
        ("Η συνάντηση με την ομάδα πωλήσεων είναι την Τρίτη.", "el"),
        ("الاجتماع مع فريق المبيعات يوم الثلاثاء.", "ar"),
        ("बिक्री टीम के साथ बैठक मंगलवार को है।", "hi"),
        ("Întâlnirea cu echipa de vânzări este marți și durează o oră.", "ro"),
        ("Satış ekibiyle toplantı salı günü ve bir saat sürecek.", "tr"),
        ("ok 42", "en"),
    ],
)
def test_detects_the_language_of_a_text(text, language):
    assert detect(text) == language


def test_a_single_foreign_function_word_is_a_hint_matched_beside_english():
    assert query_languages("see ya") == ("en", "es")
    assert query_languages("Welche Auszeichnung erhielt sie?") == ("de",)


def test_each_language_is_stemmed_by_its_own_stemmer_and_loses_its_function_words():
    assert analyze("Las reuniones del equipo") == analyze("la reunión de los equipos")
    assert analyze("as avaliações do curso") == analyze("a avaliação dos cursos")
    assert analyze("Die Besprechungen des Teams") == analyze("die Besprechung im Team")
    assert analyze("встречи команды") == analyze("встреча команд")
    assert analyze("Η Αθήνα είναι η πρωτεύουσα της Ελλάδας") == ["αθην", "πρωτευ", "ελλαδ"]
    assert "في" not in analyze("الاجتماع في القاهرة")


def test_scripts_without_spaces_become_pairs_of_characters():
    assert analyze("销售团队") == ["销售", "售团", "团队"]
    assert analyze("会議 meeting") == ["会議", "meet"]
    # Khmer and Burmese are written without spaces too: a sentence is not one term.
    assert analyze("ភាសាខ្មែរ") == ["ភា", "ាស", "សា", "ាខ", "ខ្", "្ម", "មែ", "ែរ"]
    assert len(analyze("မြန်မာဘာသာစကား")) == len("မြန်မာဘာသာစကား") - 1


def test_vowel_signs_stay_inside_their_words():
    # Devanagari's vowel signs are combining marks, which a regular expression's \w does not match.
    assert analyze("भारत की राजधानी नई दिल्ली है") == ["भारत", "राजधान", "न", "दिल्ल"]
    assert analyze("தமிழ்நாடு மாநிலம்") == ["தமிழ்நாடு", "மாநிலம்"]
    assert vocabulary_words("भारत की राजधानी") == ["भारत", "राजधानी"]


def test_a_turkish_capital_i_lowercases_to_the_letter_typed_in_lowercase():
    assert analyze("İstanbul'da toplantı") == analyze("istanbul'da toplantı")


def test_text_typed_as_letters_and_separate_accents_analyses_as_composed_text():
    for text in ("A avaliação do acadêmico", "Tôi đang ăn phở ở Hà Nội", "Café München"):
        decomposed = unicodedata.normalize("NFD", text)
        assert decomposed != text
        assert analyze(decomposed) == analyze(text)
        assert detect(decomposed) == detect(text)
        assert analyze_query(decomposed) == analyze_query(text)
