package lsp

import (
	"context"
	"encoding/json"
	"errors"
)

// Position, Range, Location, Symbol, CompletionItem and CompletionList are
// the shapes Daytona's toolbox answers in (LSP's, flattened).
type Position struct {
	Line      int `json:"line"`
	Character int `json:"character"`
}

type Range struct {
	Start Position `json:"start"`
	End   Position `json:"end"`
}

type Location struct {
	URI   string `json:"uri"`
	Range Range  `json:"range"`
}

type Symbol struct {
	Name     string   `json:"name"`
	Kind     int      `json:"kind"`
	Location Location `json:"location"`
}

type CompletionItem struct {
	Label         string `json:"label"`
	Kind          int    `json:"kind,omitempty"`
	Detail        string `json:"detail,omitempty"`
	Documentation any    `json:"documentation,omitempty"` // an object: LSP's MarkupContent
	SortText      string `json:"sortText,omitempty"`
	FilterText    string `json:"filterText,omitempty"`
	InsertText    string `json:"insertText,omitempty"`
}

type CompletionList struct {
	IsIncomplete bool             `json:"isIncomplete"`
	Items        []CompletionItem `json:"items"`
}

// Open tells the server a document is open with text.
func (s *Server) Open(uri, text string) error {
	return s.Notify("textDocument/didOpen", map[string]any{"textDocument": map[string]any{
		"uri": uri, "languageId": s.Language, "version": 1, "text": text}})
}

// Close tells the server a document is closed.
func (s *Server) Close(uri string) error {
	return s.Notify("textDocument/didClose", map[string]any{"textDocument": map[string]string{"uri": uri}})
}

// symbol is a SymbolInformation or a DocumentSymbol (with children).
type symbol struct {
	Name     string    `json:"name"`
	Kind     int       `json:"kind"`
	Location *Location `json:"location"`
	Range    *Range    `json:"range"`
	Children []symbol  `json:"children"`
}

// flatten is symbols as Daytona lists them: each with its location, a
// DocumentSymbol's children after it.
func flatten(uri string, in []symbol, out []Symbol) []Symbol {
	for _, sym := range in {
		loc := Location{URI: uri}
		switch {
		case sym.Location != nil:
			loc = *sym.Location
		case sym.Range != nil:
			loc.Range = *sym.Range
		}
		out = append(out, Symbol{Name: sym.Name, Kind: sym.Kind, Location: loc})
		out = flatten(uri, sym.Children, out)
	}
	return out
}

// DocumentSymbols lists the symbols of an open document.
func (s *Server) DocumentSymbols(ctx context.Context, uri string) ([]Symbol, error) {
	var in []symbol
	if err := s.Call(ctx, "textDocument/documentSymbol", map[string]any{"textDocument": map[string]string{"uri": uri}}, &in); err != nil {
		return nil, err
	}
	return flatten(uri, in, []Symbol{}), nil
}

// WorkspaceSymbols finds symbols of the project by query; a server that
// offers no such search finds none.
func (s *Server) WorkspaceSymbols(ctx context.Context, query string) ([]Symbol, error) {
	var in []symbol
	err := s.Call(ctx, "workspace/symbol", map[string]string{"query": query}, &in)
	var e *Error
	if errors.As(err, &e) && e.Code == MethodNotFound {
		return []Symbol{}, nil
	}
	if err != nil {
		return nil, err
	}
	return flatten("", in, []Symbol{}), nil
}

// Completions are the server's completions at pos of an open document;
// trigger is LSP's CompletionContext, or nil.
func (s *Server) Completions(ctx context.Context, uri string, pos Position, trigger any) (CompletionList, error) {
	params := map[string]any{"textDocument": map[string]string{"uri": uri}, "position": pos}
	if trigger != nil {
		params["context"] = trigger
	}
	var raw json.RawMessage
	if err := s.Call(ctx, "textDocument/completion", params, &raw); err != nil {
		return CompletionList{}, err
	}
	list := CompletionList{Items: []CompletionItem{}}
	var items []completionItem
	if json.Unmarshal(raw, &items) != nil { // not an array: a CompletionList
		var l struct {
			IsIncomplete bool             `json:"isIncomplete"`
			Items        []completionItem `json:"items"`
		}
		if err := json.Unmarshal(raw, &l); err != nil && string(raw) != "null" {
			return list, err
		}
		list.IsIncomplete, items = l.IsIncomplete, l.Items
	}
	for _, it := range items {
		list.Items = append(list.Items, it.item())
	}
	return list, nil
}

// completionItem is LSP's, whose documentation is a string or an object.
type completionItem struct {
	CompletionItem
	Documentation json.RawMessage `json:"documentation"`
}

func (c completionItem) item() CompletionItem {
	it := c.CompletionItem
	var text string
	var obj map[string]any
	switch {
	case json.Unmarshal(c.Documentation, &text) == nil && text != "":
		it.Documentation = map[string]string{"kind": "plaintext", "value": text}
	case json.Unmarshal(c.Documentation, &obj) == nil && obj != nil:
		it.Documentation = obj
	}
	return it
}
