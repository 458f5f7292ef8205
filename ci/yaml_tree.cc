#include "ci/yaml_tree.h"

#include <yaml.h>

#include <algorithm>
#include <cctype>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "absl/strings/str_cat.h"

namespace gdt::ci {
namespace {

YamlMark ToMark(const yaml_mark_t& mark) {
  return YamlMark{static_cast<int>(mark.line), static_cast<int>(mark.column),
                  mark.index};
}

}  // namespace

YamlTree::PackedMark YamlTree::Pack(const YamlMark& mark) {
  return YamlTree::PackedMark{static_cast<uint32_t>(mark.line),
                              static_cast<uint32_t>(mark.column),
                              static_cast<uint32_t>(mark.pos)};
}
YamlMark YamlTree::Unpack(const PackedMark& mark) {
  return YamlMark{static_cast<int>(mark.line), static_cast<int>(mark.column),
                  mark.pos};
}

namespace {

// libyaml's marks count characters (code points), not bytes: turns its
// character index into a byte offset into the text it read. Marks arrive in
// nearly increasing order, so a cursor that walks forward (or back) from the
// last answer costs linear time over a whole file.
class ByteOffsets {
 public:
  explicit ByteOffsets(std::string_view text) : text_(text) {}

  size_t At(size_t index) {
    while (chars_ < index && bytes_ < text_.size()) {
      ++bytes_;
      while (bytes_ < text_.size() && IsContinuation(text_[bytes_])) ++bytes_;
      ++chars_;
    }
    while (chars_ > index && bytes_ > 0) {
      --bytes_;
      while (bytes_ > 0 && IsContinuation(text_[bytes_])) --bytes_;
      --chars_;
    }
    return bytes_;
  }

 private:
  static bool IsContinuation(char c) {
    return (static_cast<unsigned char>(c) & 0xC0) == 0x80;
  }
  std::string_view text_;
  size_t chars_ = 0;
  size_t bytes_ = 0;
};

// Owns one libyaml event.
class Event {
 public:
  Event() = default;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event() {
    if (parsed_) yaml_event_delete(&event_);
  }
  yaml_event_t* get() { return &event_; }
  void set_parsed() { parsed_ = true; }
  const yaml_event_t& operator*() const { return event_; }
  const yaml_event_t* operator->() const { return &event_; }

 private:
  yaml_event_t event_{};
  bool parsed_ = false;
};

// Owns the libyaml parser.
class Parser {
 public:
  explicit Parser(std::string_view text) {
    ok_ = yaml_parser_initialize(&parser_) != 0;
    if (ok_) {
      yaml_parser_set_input_string(
          &parser_, reinterpret_cast<const unsigned char*>(text.data()),
          text.size());
      yaml_parser_set_encoding(&parser_, YAML_UTF8_ENCODING);
    }
  }
  Parser(const Parser&) = delete;
  Parser& operator=(const Parser&) = delete;
  ~Parser() {
    if (ok_) yaml_parser_delete(&parser_);
  }
  bool ok() const { return ok_; }
  yaml_parser_t* get() { return &parser_; }

 private:
  yaml_parser_t parser_{};
  bool ok_ = false;
};

std::string_view AsView(const yaml_char_t* text) {
  return text == nullptr
             ? std::string_view()
             : std::string_view(reinterpret_cast<const char*>(text));
}

// Where the content of a node with properties (`&anchor`, `!tag`) starts:
// after them and the spaces, line breaks and comments that follow.
YamlMark SkipProperties(std::string_view text, YamlMark mark) {
  size_t pos = mark.pos;
  int line = mark.line;
  int column = mark.column;
  const auto advance = [&] {
    if (text[pos] == '\n') {
      ++line;
      column = 0;
    } else if ((static_cast<unsigned char>(text[pos]) & 0xC0) != 0x80) {
      ++column;  // Columns count characters, as libyaml's do.
    }
    ++pos;
  };
  bool in_properties = true;
  while (pos < text.size()) {
    const char c = text[pos];
    if (in_properties && (c == '&' || c == '!')) {
      while (pos < text.size() && text[pos] != ' ' && text[pos] != '\n' &&
             text[pos] != '\r' && text[pos] != '\t') {
        advance();
      }
    } else if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
      advance();
    } else if (c == '#') {
      while (pos < text.size() && text[pos] != '\n') advance();
    } else {
      break;
    }
  }
  return YamlMark{line, column, pos};
}

std::string TooManyTags() {
  return absl::StrCat("more than ", YamlTree::kMaxTags,
                      " distinct YAML tags; gdt-ci reads at most that many");
}

bool IsNullText(std::string_view value) {
  return value.empty() || value == "~" || value == "null" || value == "Null" ||
         value == "NULL";
}

}  // namespace

std::optional<uint16_t> YamlTree::TagIndex(std::string_view tag) {
  if (tag_index_.empty()) {
    for (size_t i = 0; i < tags_.size(); ++i) {
      tag_index_.emplace(tags_[i], static_cast<uint16_t>(i));
    }
  }
  if (auto found = tag_index_.find(std::string(tag));
      found != tag_index_.end()) {
    return found->second;
  }
  if (tags_.size() > kMaxTags) return std::nullopt;
  tags_.emplace_back(tag);
  const auto index = static_cast<uint16_t>(tags_.size() - 1);
  tag_index_.emplace(tags_.back(), index);
  return index;
}

std::unique_ptr<YamlTree> YamlTree::Parse(std::string_view text,
                                          YamlError* error, int max_depth) {
  auto tree = std::unique_ptr<YamlTree>(new YamlTree());
  *error = YamlError{};
  // A UTF-8 byte order mark, which GitLab's YAML reader skips: libyaml
  // reads the rest, and marks become byte offsets into `text` (libyaml
  // counts characters; lines and columns stay in characters).
  const size_t bom = text.substr(0, 3) == "\xEF\xBB\xBF" ? 3 : 0;
  Parser parser(text.substr(bom));
  ByteOffsets offsets(text.substr(bom));
  const auto to_mark = [bom, &offsets](const yaml_mark_t& mark) {
    YamlMark out = ToMark(mark);
    out.pos = offsets.At(mark.index) + bom;
    return out;
  };
  if (!parser.ok()) {
    error->message = "cannot start the YAML parser";
    return tree;
  }
  std::deque<Data>& nodes = tree->nodes_;
  std::vector<uint32_t>& children = tree->children_;
  // The children of each open collection, until it closes and they move to
  // `children` in one piece (one scratch list per depth, reused).
  std::vector<std::vector<uint32_t>> pending;
  std::unordered_map<std::string, uint32_t> anchors;
  // Anchors of the documents before this one.
  std::unordered_set<std::string> earlier;
  // Open collections (indices into nodes).
  std::vector<uint32_t> stack;
  // Per node: whether it is an open collection, and how many nodes it holds
  // with every alias in it written out (saturating).
  std::vector<bool> open;
  std::vector<uint64_t> expanded;
  uint64_t alias_nodes = 0;  // Nodes the aliases stand for, in all.
  bool have_root = false;
  uint32_t root = 0;

  // Attaches node `index` to the open collection, or makes it the root.
  const auto attach = [&](uint32_t index) {
    if (stack.empty()) {
      root = index;
      have_root = true;
      return;
    }
    Data& parent = nodes[stack.back()];
    Data& child = nodes[index];
    std::vector<uint32_t>& siblings = pending[stack.size() - 1];
    // An empty value's mark is libyaml's next token; place it just after
    // the key (or the previous item) so that the parent's end stays right.
    if (child.kind == Data::kScalar && child.null && child.scalar.empty() &&
        child.start.pos == child.end.pos) {
      PackedMark at = parent.start;
      if (!siblings.empty()) at = nodes[siblings.back()].end;
      child.start = child.end = child.properties = at;
    }
    siblings.push_back(index);
  };
  const auto fail = [&](YamlMark mark, std::string message) {
    error->mark = mark;
    error->message = std::move(message);
  };
  const auto properties = [&](Data& data, const yaml_char_t* anchor,
                              const yaml_mark_t& start) {
    data.properties = Pack(to_mark(start));
    if (anchor != nullptr) {
      tree->anchors_.emplace_back(AsView(anchor));
      data.anchor = static_cast<uint32_t>(tree->anchors_.size() - 1);
      anchors[std::string(AsView(anchor))] =
          static_cast<uint32_t>(nodes.size() - 1);
    }
  };

  while (true) {
    Event event;
    if (yaml_parser_parse(parser.get(), event.get()) == 0) {
      const yaml_parser_t& p = *parser.get();
      std::string message = p.problem != nullptr ? p.problem : "bad YAML";
      if (p.context != nullptr) {
        message = absl::StrCat(message, " (", p.context, ")");
      }
      YamlMark mark = to_mark(p.problem_mark);
      if (p.error == YAML_READER_ERROR &&
          p.problem_offset + bom <= text.size()) {
        // The reader (encoding) gives a byte offset, not a mark.
        const size_t offset = p.problem_offset + bom;
        const std::string_view before = text.substr(0, offset);
        const size_t line_start = before.rfind('\n');
        mark.pos = offset;
        mark.line =
            static_cast<int>(std::count(before.begin(), before.end(), '\n'));
        mark.column = static_cast<int>(line_start == std::string_view::npos
                                           ? p.problem_offset
                                           : offset - line_start - 1);
      }
      fail(mark, std::move(message));
      return tree;
    }
    event.set_parsed();
    const yaml_event_t& e = *event;
    switch (e.type) {
      case YAML_STREAM_START_EVENT:
      case YAML_NO_EVENT:
        break;
      case YAML_STREAM_END_EVENT:
        return tree;
      case YAML_DOCUMENT_START_EVENT:
        // Anchors belong to their document: GitLab reads each document
        // on its own, so an alias cannot name an earlier one's anchor.
        for (const auto& [name, index] : anchors) earlier.insert(name);
        anchors.clear();
        have_root = false;
        break;
      case YAML_DOCUMENT_END_EVENT:
        if (have_root) {
          tree->documents_.emplace_back(tree.get(), root);
        }
        break;
      case YAML_ALIAS_EVENT: {
        const auto found =
            anchors.find(std::string(AsView(e.data.alias.anchor)));
        if (found == anchors.end()) {
          const std::string name(AsView(e.data.alias.anchor));
          fail(to_mark(e.start_mark),
               absl::StrCat("unknown alias *", name,
                            earlier.count(name) != 0
                                ? " (its anchor is in an earlier document; "
                                  "each YAML document has its own anchors)"
                                : ""));
          return tree;
        }
        if (open[found->second]) {
          fail(to_mark(e.start_mark),
               absl::StrCat("alias *", std::string(AsView(e.data.alias.anchor)),
                            " is used inside the node it names (a cycle)"));
          return tree;
        }
        alias_nodes += expanded[found->second];
        if (alias_nodes > kMaxAliasNodes) {
          fail(to_mark(e.start_mark),
               absl::StrCat("aliases stand for more than ", kMaxAliasNodes,
                            " nodes (an alias bomb?); GitLab refuses a "
                            "file this large once its aliases are expanded"));
          return tree;
        }
        attach(found->second);
        break;
      }
      case YAML_SCALAR_EVENT: {
        nodes.emplace_back();
        Data& data = nodes.back();
        data.kind = Data::kScalar;
        const auto& s = e.data.scalar;
        data.scalar.assign(reinterpret_cast<const char*>(s.value), s.length);
        open.push_back(false);
        expanded.push_back(1);
        if (s.tag != nullptr) {
          std::optional<uint16_t> tag_index = tree->TagIndex(AsView(s.tag));
          if (!tag_index.has_value()) {
            fail(to_mark(e.start_mark), TooManyTags());
            return tree;
          }
          data.tag = *tag_index;
        } else {
          data.tag = s.style == YAML_PLAIN_SCALAR_STYLE ? 0 : 1;
        }
        data.null = data.tag == 0 && IsNullText(data.scalar);
        data.start = Pack(to_mark(e.start_mark));
        data.end = Pack(to_mark(e.end_mark));
        properties(data, s.anchor, e.start_mark);
        if (s.anchor != nullptr || s.tag != nullptr) {
          data.start = Pack(SkipProperties(text, to_mark(e.start_mark)));
          if (data.start.pos > data.end.pos) data.start = data.end;
        }
        attach(static_cast<uint32_t>(nodes.size() - 1));
        break;
      }
      case YAML_SEQUENCE_START_EVENT:
      case YAML_MAPPING_START_EVENT: {
        if (static_cast<int>(stack.size()) >= max_depth) {
          fail(to_mark(e.start_mark),
               absl::StrCat("nesting deeper than ", max_depth,
                            " levels; gdt-ci reads at most that many"));
          return tree;
        }
        nodes.emplace_back();
        Data& data = nodes.back();
        const bool map = e.type == YAML_MAPPING_START_EVENT;
        data.kind = map ? Data::kMap : Data::kSequence;
        const yaml_char_t* tag =
            map ? e.data.mapping_start.tag : e.data.sequence_start.tag;
        const yaml_char_t* anchor =
            map ? e.data.mapping_start.anchor : e.data.sequence_start.anchor;
        data.flow =
            map ? e.data.mapping_start.style == YAML_FLOW_MAPPING_STYLE
                : e.data.sequence_start.style == YAML_FLOW_SEQUENCE_STYLE;
        open.push_back(true);
        expanded.push_back(1);
        if (tag != nullptr) {
          std::optional<uint16_t> tag_index = tree->TagIndex(AsView(tag));
          if (!tag_index.has_value()) {
            fail(to_mark(e.start_mark), TooManyTags());
            return tree;
          }
          data.tag = *tag_index;
        }
        data.start = Pack(to_mark(e.start_mark));
        properties(data, anchor, e.start_mark);
        if (anchor != nullptr || tag != nullptr) {
          data.start = Pack(SkipProperties(text, to_mark(e.start_mark)));
        }
        data.end = data.start;
        const auto index = static_cast<uint32_t>(nodes.size() - 1);
        attach(index);
        stack.push_back(index);
        if (pending.size() < stack.size()) pending.emplace_back();
        pending[stack.size() - 1].clear();
        break;
      }
      case YAML_SEQUENCE_END_EVENT:
      case YAML_MAPPING_END_EVENT: {
        Data& data = nodes[stack.back()];
        std::vector<uint32_t>& mine = pending[stack.size() - 1];
        if (data.flow) {
          data.end = Pack(to_mark(e.end_mark));
        } else if (!mine.empty()) {
          data.end = nodes[mine.back()].end;
        }
        data.first = static_cast<uint32_t>(children.size());
        data.count = static_cast<uint32_t>(mine.size());
        children.insert(children.end(), mine.begin(), mine.end());
        uint64_t total = 1;
        for (const uint32_t child : mine) {
          total =
              std::min<uint64_t>(total + expanded[child], uint64_t{1} << 62);
        }
        expanded[stack.back()] = total;
        open[stack.back()] = false;
        stack.pop_back();
        break;
      }
    }
  }
}

bool YamlNode::IsMap() const {
  return tree_ != nullptr && tree_->nodes_[index_].kind == YamlTree::Data::kMap;
}
bool YamlNode::IsSequence() const {
  return tree_ != nullptr &&
         tree_->nodes_[index_].kind == YamlTree::Data::kSequence;
}
bool YamlNode::IsScalar() const {
  return tree_ != nullptr &&
         tree_->nodes_[index_].kind == YamlTree::Data::kScalar &&
         !tree_->nodes_[index_].null;
}
bool YamlNode::IsNull() const {
  return tree_ == nullptr || tree_->nodes_[index_].null;
}
const std::string& YamlNode::Scalar() const {
  static const std::string empty;
  return tree_ == nullptr ? empty : tree_->nodes_[index_].scalar;
}
const std::string& YamlNode::Tag() const {
  static const std::string none;
  return tree_ == nullptr ? none : tree_->tags_[tree_->nodes_[index_].tag];
}
const std::string& YamlNode::Anchor() const {
  static const std::string none;
  return tree_ == nullptr ? none
                          : tree_->anchors_[tree_->nodes_[index_].anchor];
}
bool YamlNode::IsFlow() const {
  return tree_ != nullptr && tree_->nodes_[index_].flow;
}
YamlMark YamlNode::Mark() const {
  return tree_ == nullptr ? YamlMark{}
                          : YamlTree::Unpack(tree_->nodes_[index_].start);
}
YamlMark YamlNode::EndMark() const {
  return tree_ == nullptr ? YamlMark{}
                          : YamlTree::Unpack(tree_->nodes_[index_].end);
}
YamlMark YamlNode::PropertiesMark() const {
  return tree_ == nullptr ? YamlMark{}
                          : YamlTree::Unpack(tree_->nodes_[index_].properties);
}
size_t YamlNode::size() const {
  if (tree_ == nullptr) return 0;
  const YamlTree::Data& data = tree_->nodes_[index_];
  if (data.kind == YamlTree::Data::kMap) return data.count / 2;
  return data.count;
}
std::pair<YamlNode, YamlNode> YamlNode::Entry(size_t i) const {
  if (!IsMap()) return {};
  const uint32_t first = tree_->nodes_[index_].first;
  return {YamlNode(tree_, tree_->children_[first + 2 * i]),
          YamlNode(tree_, tree_->children_[first + 2 * i + 1])};
}
YamlNode YamlNode::Item(size_t i) const {
  if (!IsSequence()) return {};
  return YamlNode(tree_, tree_->children_[tree_->nodes_[index_].first + i]);
}

YamlElement YamlNode::Iterator::operator*() const {
  YamlElement element;
  if (node_->IsMap()) {
    auto [key, value] = node_->Entry(i_);
    element.first = key;
    element.second = value;
  } else {
    static_cast<YamlNode&>(element) = node_->Item(i_);
  }
  return element;
}

GitLabDocuments DocumentsGitLabReads(std::string_view text,
                                     const std::vector<YamlNode>& documents) {
  GitLabDocuments out;
  std::vector<size_t> starts = {0};
  for (size_t pos = 0; pos < text.size() && starts.size() < 3;) {
    if (text.compare(pos, 3, "---") == 0 && pos + 3 < text.size() &&
        std::isspace(static_cast<unsigned char>(text[pos + 3])) != 0) {
      starts.push_back(pos + 3);
    }
    pos = text.find('\n', pos);
    if (pos == std::string_view::npos) break;
    ++pos;
  }
  // The first document of each piece that holds one.
  std::vector<size_t> firsts;
  size_t d = 0;
  for (size_t piece = 0; piece < starts.size(); ++piece) {
    const size_t end =
        piece + 1 < starts.size() ? starts[piece + 1] : text.size();
    while (d < documents.size() && documents[d].Mark().pos < starts[piece]) {
      ++d;
    }
    if (d < documents.size() && documents[d].Mark().pos < end) {
      firsts.push_back(d);
    }
  }
  if (firsts.empty()) return out;
  bool spec = false;
  if (documents[firsts[0]].IsMap()) {
    for (const auto& entry : documents[firsts[0]]) {
      if (entry.first.IsScalar() && entry.first.Scalar() == "spec") spec = true;
    }
  }
  out.header = firsts.size() > 1 && spec;
  const size_t piece = out.header ? firsts.size() - 1 : 0;
  out.loaded = firsts[piece];
  out.piece_end =
      piece + 1 < firsts.size() ? firsts[piece + 1] : documents.size();
  return out;
}

}  // namespace gdt::ci
