import Foundation
import SDUIProxyCore
import Testing

@Suite("The test fixtures")
struct FixturesTests {
    @Test("the Beagle fixture directory holds exactly the listed fixtures")
    func listingMatches() throws {
        #expect(try Fixtures.beagleDirectoryListing() == Fixtures.beagleNames.sorted())
        #expect(Set(Fixtures.beagleNames).count == Fixtures.beagleNames.count)
    }

    @Test("the fixtures live inside the repository")
    func insideTheRepository() {
        let root = Fixtures.repositoryRoot.standardizedFileURL.path + "/"
        #expect(Fixtures.beagleDirectory.standardizedFileURL.path.hasPrefix(root))
        #expect(Fixtures.sampleScreensDirectory.standardizedFileURL.path.hasPrefix(root))
        #expect(FileManager.default.fileExists(atPath: root + "Package.swift"))
    }

    @Test("a missing fixture is an error naming its path, thrown to the test that reads it")
    func missingFixture() {
        let path = Fixtures.beagleDirectory.appendingPathComponent("no-such-screen.json").path
        #expect(throws: Fixtures.Failure.missing(path: path)) { try Fixtures.data("no-such-screen.json") }
        #expect(throws: Fixtures.Failure.missing(path: path)) { try Fixtures.json("no-such-screen.json") }
        #expect(Fixtures.Failure.missing(path: path).description.contains(path))
        let sample = Fixtures.sampleScreensDirectory.appendingPathComponent("nowhere.json").path
        #expect(throws: Fixtures.Failure.missing(path: sample)) { try Fixtures.sampleScreenData("nowhere.json") }
    }

    @Test("names that could lead out of the fixture directories are refused before anything is read")
    func namesStayInside() {
        for name in ["./welcome-screen.json", ".", "", ".hidden.json", "sub/dir.json", "beagle/../text.json"] {
            #expect(throws: Fixtures.Failure.invalidName(name)) { try Fixtures.data(name) }
        }
        for name in ["products/../../../README.md", "./home.json", "/etc/hostname"] {
            #expect(throws: Fixtures.Failure.invalidName(name)) { try Fixtures.sampleScreenData(name) }
        }
    }
}

extension FixturesTests {
    @Test("the Beagle fixtures hold components, actions, and a document that is neither")
    func kinds() throws {
        var components = 0
        var actions = 0
        var others = 0
        for name in Fixtures.beagleNames {
            let root = try Fixtures.json(name)
            if root["_beagleComponent_"]?.stringValue != nil {
                components += 1
            } else if root["_beagleAction_"]?.stringValue != nil {
                actions += 1
            } else {
                others += 1
            }
        }
        #expect(components >= 15)
        #expect(actions >= 10)
        #expect(others == 1)
    }
}
