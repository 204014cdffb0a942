import Testing

@testable import SDUIProxyCore

@Suite("RFC 9110 §12.5.4: the language a request prefers, and the preferences a response's Content-Language meets")
struct LanguageVariantsTests {
    @Test("RFC 9110 §12.5.4: the ranges of the highest weight, lower case, in the order of their text")
    func preferred() {
        #expect(LanguageVariants.preferred(acceptLanguage: ["fr;q=0.5, de;q=1.0"]) == ["de"])
        #expect(LanguageVariants.preferred(acceptLanguage: ["en, de"]) == ["de", "en"])
        #expect(LanguageVariants.preferred(acceptLanguage: ["de-CH", "en;q=0.7"]) == ["de-ch"])
        #expect(LanguageVariants.preferred(acceptLanguage: ["de;q=0.8, fr;q=0.3"]) == ["de"])
        #expect(LanguageVariants.preferred(acceptLanguage: ["a, b, c, d, e, f"]).count == 4)
    }

    @Test("RFC 9110 §12.5.4: nothing is preferred when the field is absent, refuses all, prefers any, or is malformed")
    func nothingPreferred() {
        #expect(LanguageVariants.preferred(acceptLanguage: []).isEmpty)
        #expect(LanguageVariants.preferred(acceptLanguage: ["fr;q=0"]).isEmpty)
        // Any language preferred over German: the backend's default would answer, not the German one.
        #expect(LanguageVariants.preferred(acceptLanguage: ["de;q=0.8, *;q=0.9"]).isEmpty)
        #expect(LanguageVariants.preferred(acceptLanguage: ["*"]).isEmpty)
        #expect(LanguageVariants.preferred(acceptLanguage: ["en;x=1"]).isEmpty)
        #expect(LanguageVariants.preferred(acceptLanguage: ["en;q=2"]).isEmpty)
    }

    @Test("a Content-Language meets each language it lists, whole: `de-CH` is not taken for `de`")
    func answered() {
        #expect(LanguageVariants.ranges(answeredBy: "de") == ["de"])
        #expect(LanguageVariants.ranges(answeredBy: "de-CH") == ["de-ch"])
        #expect(LanguageVariants.ranges(answeredBy: "de, en-GB, DE") == ["de", "en-gb"])
        #expect(LanguageVariants.ranges(answeredBy: "").isEmpty)
        #expect(LanguageVariants.ranges(answeredBy: "*").isEmpty)
        #expect(LanguageVariants.ranges(answeredBy: "a, b, c, d, e, f, g, h, i, j").count == 8)
        #expect(LanguageVariants.answers(contentLanguage: "de-CH", range: "de-ch"))
        #expect(!LanguageVariants.answers(contentLanguage: "de-CH", range: "de"))
        #expect(!LanguageVariants.answers(contentLanguage: "de", range: "de-ch"))
        #expect(!LanguageVariants.answers(contentLanguage: "fr", range: "de"))
    }
}
