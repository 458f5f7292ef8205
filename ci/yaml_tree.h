#ifndef GDT_CI_YAML_TREE_H_
#define GDT_CI_YAML_TREE_H_

// A compact, read-only YAML tree built from libyaml's event stream, for
// gdt-ci expand and lint. Unlike a general YAML library it keeps what a
// text rewrite needs: every node's start and end byte offset, whether it was
// written in flow or block style, quoted or plain, its tag and anchor, and
// every document of a multi-document file. Building is one pass over the
// events with an explicit stack (no recursion), so deep but valid nesting
// and large files cost linear time and memory.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace gdt::ci {

// A place in the text: 0-based line and column (in characters, as libyaml
// counts them), and the byte offset into the text.
struct YamlMark {
  int line = -1;
  int column = -1;
  size_t pos = 0;
  bool is_null() const { return line < 0; }
};

class YamlTree;

// A handle on one node of a YamlTree (or no node). Aliases resolve to their
// anchored node, so an alias and its anchor are the same node with the same
// marks. Cheap to copy; valid as long as its tree lives.
class YamlNode {
 public:
  YamlNode() = default;
  YamlNode(const YamlTree* tree, uint32_t index) : tree_(tree), index_(index) {}

  explicit operator bool() const { return tree_ != nullptr; }
  bool IsMap() const;
  bool IsSequence() const;
  // A scalar that is not null (`~`, `null`, or nothing, unquoted and
  // untagged, are null).
  bool IsScalar() const;
  bool IsNull() const;
  // The scalar's value (empty for other nodes).
  const std::string& Scalar() const;
  // "?" for a plain untagged node, "!" for a quoted untagged scalar, else
  // the tag as libyaml resolves it ("!reference", "tag:yaml.org,2002:str").
  const std::string& Tag() const;
  const std::string& Anchor() const;
  bool IsFlow() const;  // A flow collection ({...} or [...]).
  bool IsPlain() const { return Tag() == "?"; }
  YamlMark Mark() const;     // Where the node starts (after tag and anchor).
  YamlMark EndMark() const;  // Just after its last character.
  // The mark of the node's tag or anchor when it has one, else Mark().
  YamlMark PropertiesMark() const;
  // Entries of a mapping or items of a sequence.
  size_t size() const;
  // Mapping entries: key and value. Empty for other nodes.
  std::pair<YamlNode, YamlNode> Entry(size_t i) const;
  // Sequence items.
  YamlNode Item(size_t i) const;
  uint32_t index() const { return index_; }
  bool operator==(const YamlNode& other) const {
    return tree_ == other.tree_ && index_ == other.index_;
  }

  // Iteration like yaml-cpp's: over a mapping each element has `first` and
  // `second`; over a sequence each element is the item itself.
  class Iterator;
  Iterator begin() const;
  Iterator end() const;

 private:
  const YamlTree* tree_ = nullptr;
  uint32_t index_ = 0;
};

// One element of an iteration over a YamlNode.
struct YamlElement : YamlNode {
  YamlNode first;
  YamlNode second;
};

class YamlNode::Iterator {
 public:
  Iterator(const YamlNode* node, size_t i) : node_(node), i_(i) {}
  YamlElement operator*() const;
  Iterator& operator++() {
    ++i_;
    return *this;
  }
  bool operator!=(const Iterator& other) const { return i_ != other.i_; }

 private:
  const YamlNode* node_;
  size_t i_;
};
inline YamlNode::Iterator YamlNode::begin() const { return Iterator(this, 0); }
inline YamlNode::Iterator YamlNode::end() const {
  return Iterator(this, size());
}

// A YAML syntax error with its place.
struct YamlError {
  YamlMark mark;
  std::string message;
};

// Every document of one YAML text.
class YamlTree {
 public:
  // Parses `text`. A syntax error, or nesting deeper than `max_depth`,
  // fills `error` and returns the documents read before it.
  // An alias used inside the node it names (a cycle) is an error, as are
  // aliases that stand for more than kMaxAliasNodes nodes in all (an alias
  // bomb: GitLab refuses such a file as too big once expanded).
  static std::unique_ptr<YamlTree> Parse(std::string_view text,
                                         YamlError* error,
                                         int max_depth = 10000);
  static constexpr uint64_t kMaxAliasNodes = 1'000'000;
  static constexpr size_t kMaxTags = 60'000;

  // The root node of each document, in order.
  const std::vector<YamlNode>& documents() const { return documents_; }
  // How many distinct nodes (an alias is its anchor's node); every
  // YamlNode::index() is below it.
  size_t node_count() const { return nodes_.size(); }

 private:
  friend class YamlNode;
  // A mark in 12 bytes (CI files are far below 4 GiB).
  struct PackedMark {
    uint32_t line = 0;
    uint32_t column = 0;
    uint32_t pos = 0;
  };
  struct Data {
    enum Kind : uint8_t { kScalar, kSequence, kMap } kind = kScalar;
    bool null = false;
    bool flow = false;
    uint16_t tag = 0;     // Index into tags_.
    uint32_t anchor = 0;  // Index into anchors_ (0: none).
    PackedMark start;
    PackedMark end;
    PackedMark properties;
    // Children in children_[first, first + count): map key, value, ...
    uint32_t first = 0;
    uint32_t count = 0;
    std::string scalar;
  };
  static PackedMark Pack(const YamlMark& mark);
  static YamlMark Unpack(const PackedMark& mark);
  // nullopt past kMaxTags distinct tags.
  std::optional<uint16_t> TagIndex(std::string_view tag);

  // A deque: growing it never copies the nodes already read.
  std::deque<Data> nodes_;
  std::vector<uint32_t> children_;
  std::vector<std::string> tags_ = {"?", "!"};
  std::unordered_map<std::string, uint16_t> tag_index_;
  std::vector<std::string> anchors_ = {""};
  std::vector<YamlNode> documents_;
};

// Which documents of a CI file GitLab reads. GitLab splits the text at
// lines that start with `---` and a space or line break, at most twice,
// drops blank pieces, and loads the first document of one piece: of the
// first piece, or, when that is a mapping with a `spec:` key (a header) and
// more pieces follow, of the last one. It fills in the `$[[ ... ]]` blocks
// of that whole piece's text before loading it. `documents` are the file's
// documents that are not empty (comments only), in order.
struct GitLabDocuments {
  bool header = false;   // documents[0] is a `spec:` header.
  size_t loaded = 0;     // The document whose configuration GitLab takes.
  size_t piece_end = 0;  // One past the last document of its piece.
};
GitLabDocuments DocumentsGitLabReads(std::string_view text,
                                     const std::vector<YamlNode>& documents);

}  // namespace gdt::ci

#endif  // GDT_CI_YAML_TREE_H_
