import com.fasterxml.jackson.core.json.JsonWriteFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.json.JsonMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import org.apache.lucene.analysis.Analyzer;
import org.apache.lucene.analysis.CharArraySet;
import org.apache.lucene.analysis.TokenStream;
import org.apache.lucene.analysis.cjk.CJKAnalyzer;
import org.apache.lucene.analysis.en.EnglishAnalyzer;
import org.apache.lucene.analysis.ja.JapaneseAnalyzer;
import org.apache.lucene.analysis.ja.JapaneseTokenizer;
import org.apache.lucene.analysis.miscellaneous.PerFieldAnalyzerWrapper;
import org.apache.lucene.analysis.standard.StandardAnalyzer;
import org.apache.lucene.analysis.tokenattributes.CharTermAttribute;
import org.apache.lucene.analysis.tokenattributes.OffsetAttribute;
import org.apache.lucene.analysis.tokenattributes.PositionIncrementAttribute;
import org.apache.lucene.analysis.tokenattributes.TypeAttribute;
import org.apache.lucene.codecs.Codec;
import org.apache.lucene.codecs.FilterCodec;
import org.apache.lucene.codecs.KnnVectorsFormat;
import org.apache.lucene.codecs.lucene99.Lucene99HnswVectorsFormat;
import org.apache.lucene.codecs.perfield.PerFieldKnnVectorsFormat;
import org.apache.lucene.document.Document;
import org.apache.lucene.document.Field;
import org.apache.lucene.document.KnnFloatVectorField;
import org.apache.lucene.document.NumericDocValuesField;
import org.apache.lucene.document.TextField;
import org.apache.lucene.index.DirectoryReader;
import org.apache.lucene.index.FieldInvertState;
import org.apache.lucene.index.IndexWriter;
import org.apache.lucene.index.IndexWriterConfig;
import org.apache.lucene.index.LeafReaderContext;
import org.apache.lucene.index.NumericDocValues;
import org.apache.lucene.index.VectorSimilarityFunction;
import org.apache.lucene.search.BoostQuery;
import org.apache.lucene.search.BooleanClause;
import org.apache.lucene.search.CollectionStatistics;
import org.apache.lucene.search.DisjunctionMaxQuery;
import org.apache.lucene.search.DocIdSetIterator;
import org.apache.lucene.search.IndexSearcher;
import org.apache.lucene.search.KnnFloatVectorQuery;
import org.apache.lucene.search.Query;
import org.apache.lucene.search.ScoreDoc;
import org.apache.lucene.search.ScoreMode;
import org.apache.lucene.search.Scorer;
import org.apache.lucene.search.TermStatistics;
import org.apache.lucene.search.TopDocs;
import org.apache.lucene.search.Weight;
import org.apache.lucene.search.similarities.BM25Similarity;
import org.apache.lucene.search.similarities.Similarity;
import org.apache.lucene.store.ByteBuffersDirectory;
import org.apache.lucene.util.QueryBuilder;
import org.apache.lucene.util.SmallFloat;
import org.apache.lucene.util.VectorUtil;

/**
 * Real Lucene answering the questions tests/lucene asks of es_rag's embedded mirrors, one JSON request per stdin line,
 * one JSON answer per stdout line ({"error": ...} when a request fails), in one JVM for a whole test session.
 *
 * <p>Ops: analyze, bm25, knn_exact, hnsw_recall, smallfloat (see each method). Every analyzer and scoring choice is the
 * one Elasticsearch makes for its built-ins, as cited per method; the answer is ASCII JSON (non-ASCII escaped), so the
 * Python side decodes surrogate pairs itself.
 */
public final class LuceneOracle {
  private static final ObjectMapper JSON =
      JsonMapper.builder().enable(JsonWriteFeature.ESCAPE_NON_ASCII).build();

  public static void main(String[] args) throws IOException {
    BufferedReader in =
        new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8), 1 << 20);
    BufferedWriter out =
        new BufferedWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8), 1 << 20);
    String line;
    while ((line = in.readLine()) != null) {
      if (line.isBlank()) {
        continue;
      }
      JsonNode answer;
      try {
        answer = handle(JSON.readTree(line));
      } catch (Exception e) {
        StringWriter trace = new StringWriter();
        e.printStackTrace(new PrintWriter(trace));
        answer = JSON.createObjectNode().put("error", trace.toString());
      }
      out.write(JSON.writeValueAsString(answer));
      out.write('\n');
      out.flush();
    }
  }

  static JsonNode handle(JsonNode req) throws IOException {
    String op = req.path("op").asText();
    return switch (op) {
      case "ping" -> JSON.createObjectNode().put("lucene", org.apache.lucene.util.Version.LATEST.toString());
      case "analyze" -> analyze(req);
      case "bm25" -> bm25(req);
      case "knn_exact" -> knnExact(req);
      case "hnsw_recall" -> hnswRecall(req);
      case "smallfloat" -> smallFloat(req);
      default -> throw new IllegalArgumentException("unknown op " + op);
    };
  }

  /**
   * Elasticsearch's built-in analyzer of each name, as its provider builds it:
   *
   * <ul>
   *   <li>standard: StandardAnalyzerProvider, {@code new StandardAnalyzer(parseStopWords(.., CharArraySet.EMPTY_SET))}
   *       and {@code setMaxTokenLength(max_token_length, default StandardAnalyzer.DEFAULT_MAX_TOKEN_LENGTH = 255)};
   *   <li>english: analysis-common's "english", {@code new EnglishAnalyzer(parseStopWords(..,
   *       EnglishAnalyzer.getDefaultStopSet()), parseStemExclusion(settings, CharArraySet.EMPTY_SET))};
   *   <li>cjk: CjkAnalyzerProvider, {@code new CJKAnalyzer(parseStopWords(.., CJKAnalyzer.getDefaultStopSet()))};
   *   <li>kuromoji: analysis-kuromoji's KuromojiAnalyzerProvider, {@code new JapaneseAnalyzer(userDictionary = null,
   *       KuromojiTokenizerFactory.getMode(settings) = JapaneseTokenizer.DEFAULT_MODE (SEARCH),
   *       CharArraySet.copy(JapaneseAnalyzer.getDefaultStopSet()), JapaneseAnalyzer.getDefaultStopTags())}.
   * </ul>
   */
  static Analyzer analyzer(String name) {
    return switch (name) {
      case "standard" -> {
        StandardAnalyzer a = new StandardAnalyzer(CharArraySet.EMPTY_SET);
        a.setMaxTokenLength(StandardAnalyzer.DEFAULT_MAX_TOKEN_LENGTH);
        yield a;
      }
      case "english" -> new EnglishAnalyzer(EnglishAnalyzer.getDefaultStopSet(), CharArraySet.EMPTY_SET);
      case "cjk" -> new CJKAnalyzer(CJKAnalyzer.getDefaultStopSet());
      case "kuromoji" ->
          new JapaneseAnalyzer(
              null,
              JapaneseTokenizer.DEFAULT_MODE,
              CharArraySet.copy(JapaneseAnalyzer.getDefaultStopSet()),
              JapaneseAnalyzer.getDefaultStopTags());
      default -> throw new IllegalArgumentException("unknown analyzer " + name);
    };
  }

  private static final Map<String, Analyzer> ANALYZERS = new HashMap<>();

  static synchronized Analyzer cachedAnalyzer(String name) {
    return ANALYZERS.computeIfAbsent(name, LuceneOracle::analyzer);
  }

  /**
   * {"analyzer", "texts": [..], "detail": bool} -> {"tokens": [[term, ..] per text]}; with detail each token is
   * [term, position, startOffset, endOffset, type] (offsets in UTF-16 units, as Lucene counts them).
   */
  static JsonNode analyze(JsonNode req) throws IOException {
    Analyzer a = cachedAnalyzer(req.path("analyzer").asText());
    boolean detail = req.path("detail").asBoolean(false);
    ObjectNode answer = JSON.createObjectNode();
    ArrayNode all = answer.putArray("tokens");
    for (JsonNode text : req.path("texts")) {
      ArrayNode tokens = all.addArray();
      try (TokenStream ts = a.tokenStream("f", text.asText())) {
        CharTermAttribute term = ts.addAttribute(CharTermAttribute.class);
        OffsetAttribute offset = ts.addAttribute(OffsetAttribute.class);
        PositionIncrementAttribute inc = ts.addAttribute(PositionIncrementAttribute.class);
        TypeAttribute type = ts.addAttribute(TypeAttribute.class);
        ts.reset();
        int pos = -1;
        while (ts.incrementToken()) {
          pos += inc.getPositionIncrement();
          if (detail) {
            tokens
                .addArray()
                .add(term.toString())
                .add(pos)
                .add(offset.startOffset())
                .add(offset.endOffset())
                .add(type.type());
          } else {
            tokens.add(term.toString());
          }
        }
        ts.end();
      }
    }
    return answer;
  }

  /**
   * Elasticsearch's BM25 (org.elasticsearch.lucene.similarity.LegacyBM25Similarity): Lucene's BM25Similarity with
   * the query boost multiplied by (k1 + 1), which Lucene 8 dropped from the formula and Elasticsearch keeps.
   */
  static final class LegacyBM25 extends Similarity {
    final BM25Similarity inner;

    LegacyBM25(float k1, float b) {
      inner = new BM25Similarity(k1, b);
    }

    @Override
    public long computeNorm(FieldInvertState state) {
      return inner.computeNorm(state);
    }

    @Override
    public SimScorer scorer(float boost, CollectionStatistics stats, TermStatistics... terms) {
      return inner.scorer(boost * (1 + inner.getK1()), stats, terms);
    }
  }

  /**
   * {"fields": {field: analyzer}, "docs": [{field: text or [texts]}], "queries": [..], "query_fields": [[field, boost]],
   * "tie_breaker", "k1", "b", "top", "all": bool} -> per query {"ids", "scores"} (Lucene's top n, its tie order) and,
   * with all, {"all_ids", "all_scores"}: every matching document's score. Doc ids are positions in "docs".
   *
   * <p>The index is one in-memory segment (forceMerge(1)), so the statistics are those of a one-shard index. Each query
   * is what a multi_match best_fields query builds: per field the match query's QueryBuilder.createBooleanQuery (a
   * SHOULD clause per token), boosted, under a DisjunctionMaxQuery with the tie breaker (one field: the field query).
   */
  static JsonNode bm25(JsonNode req) throws IOException {
    float k1 = (float) req.path("k1").asDouble(1.2);
    float b = (float) req.path("b").asDouble(0.75);
    Similarity sim = new LegacyBM25(k1, b);
    Map<String, Analyzer> perField = new HashMap<>();
    req.path("fields").properties().forEach(e -> perField.put(e.getKey(), cachedAnalyzer(e.getValue().asText())));
    Analyzer analyzer = new PerFieldAnalyzerWrapper(cachedAnalyzer("standard"), perField);
    ByteBuffersDirectory dir = new ByteBuffersDirectory();
    IndexWriterConfig cfg = new IndexWriterConfig(analyzer).setSimilarity(sim).setRAMBufferSizeMB(512);
    try (IndexWriter w = new IndexWriter(dir, cfg)) {
      int id = 0;
      for (JsonNode d : req.path("docs")) {
        Document doc = new Document();
        for (String f : perField.keySet()) {
          JsonNode v = d.get(f);
          if (v == null || v.isNull()) {
            continue;
          }
          for (JsonNode value : v.isArray() ? v : List.of(v)) { // an array: one value each, as a text field holds it
            doc.add(new TextField(f, value.asText(), Field.Store.NO));
          }
        }
        doc.add(new NumericDocValuesField("_id", id++));
        w.addDocument(doc);
      }
      w.forceMerge(1);
    }
    ObjectNode answer = JSON.createObjectNode();
    try (DirectoryReader reader = DirectoryReader.open(dir)) {
      IndexSearcher searcher = new IndexSearcher(reader);
      searcher.setSimilarity(sim);
      int[] ids = docIds(reader);
      ObjectNode stats = answer.putObject("stats");
      for (String f : perField.keySet()) {
        CollectionStatistics cs = searcher.collectionStatistics(f);
        stats.putObject(f)
            .put("doc_count", cs == null ? 0 : cs.docCount())
            .put("sum_total_term_freq", cs == null ? 0 : cs.sumTotalTermFreq());
      }
      int top = req.path("top").asInt(10);
      boolean all = req.path("all").asBoolean(false);
      float tie = (float) req.path("tie_breaker").asDouble(0.0);
      ArrayNode results = answer.putArray("results");
      for (JsonNode qt : req.path("queries")) {
        ObjectNode r = results.addObject();
        Query q = multiMatch(perField, req.path("query_fields"), qt.asText(), tie);
        ArrayNode topIds = r.putArray("ids");
        ArrayNode topScores = r.putArray("scores");
        ArrayNode allIds = all ? r.putArray("all_ids") : null;
        ArrayNode allScores = all ? r.putArray("all_scores") : null;
        if (q == null) { // no token: the match query matches nothing
          continue;
        }
        TopDocs hits = searcher.search(q, Math.max(1, top));
        for (ScoreDoc sd : hits.scoreDocs) {
          topIds.add(ids[sd.doc]);
          topScores.add((double) sd.score);
        }
        if (all) {
          Weight weight = searcher.createWeight(searcher.rewrite(q), ScoreMode.COMPLETE, 1f);
          for (LeafReaderContext leaf : reader.leaves()) {
            Scorer s = weight.scorer(leaf);
            if (s == null) {
              continue;
            }
            DocIdSetIterator it = s.iterator();
            for (int doc = it.nextDoc(); doc != DocIdSetIterator.NO_MORE_DOCS; doc = it.nextDoc()) {
              allIds.add(ids[leaf.docBase + doc]);
              allScores.add((double) s.score());
            }
          }
        }
      }
    }
    return answer;
  }

  static Query multiMatch(Map<String, Analyzer> analyzers, JsonNode fields, String text, float tie) {
    List<Query> perField = new ArrayList<>();
    for (JsonNode fb : fields) {
      String f = fb.get(0).asText();
      float boost = (float) fb.get(1).asDouble();
      Query q = new QueryBuilder(analyzers.get(f)).createBooleanQuery(f, text, BooleanClause.Occur.SHOULD);
      if (q != null) {
        perField.add(boost == 1f ? q : new BoostQuery(q, boost));
      }
    }
    if (perField.isEmpty()) {
      return null;
    }
    return perField.size() == 1 ? perField.get(0) : new DisjunctionMaxQuery(perField, tie);
  }

  static int[] docIds(DirectoryReader reader) throws IOException {
    int[] ids = new int[reader.maxDoc()];
    for (LeafReaderContext leaf : reader.leaves()) {
      NumericDocValues dv = leaf.reader().getNumericDocValues("_id");
      for (int doc = dv.nextDoc(); doc != DocIdSetIterator.NO_MORE_DOCS; doc = dv.nextDoc()) {
        ids[leaf.docBase + doc] = (int) dv.longValue();
      }
    }
    return ids;
  }

  /**
   * The Lucene function and vector preparation behind each Elasticsearch similarity for float vectors
   * (DenseVectorFieldMapper.VectorSimilarity): cosine is DOT_PRODUCT over vectors normalized with
   * VectorUtil.l2normalize, each only when isNotUnitVector (|squared magnitude - 1| > 1e-3; indices created since
   * NORMALIZED_VECTOR_COSINE, documents at parse time and the query in the kNN query); dot_product DOT_PRODUCT,
   * l2_norm EUCLIDEAN, max_inner_product MAXIMUM_INNER_PRODUCT.
   */
  static VectorSimilarityFunction function(String similarity) {
    return switch (similarity) {
      case "cosine", "dot_product" -> VectorSimilarityFunction.DOT_PRODUCT;
      case "l2_norm" -> VectorSimilarityFunction.EUCLIDEAN;
      case "max_inner_product" -> VectorSimilarityFunction.MAXIMUM_INNER_PRODUCT;
      default -> throw new IllegalArgumentException("unknown similarity " + similarity);
    };
  }

  static float[][] vectors(JsonNode rows, String similarity) {
    float[][] out = new float[rows.size()][];
    for (int i = 0; i < out.length; i++) {
      JsonNode row = rows.get(i);
      float[] v = new float[row.size()];
      for (int j = 0; j < v.length; j++) {
        v[j] = (float) row.get(j).asDouble();
      }
      out[i] = prepare(v, similarity);
    }
    return out;
  }

  /** Rows of a raw little-endian float32 file (numpy's {@code tofile}), {@code dims} floats each. */
  static float[][] vectorsFile(String path, int dims, String similarity) throws IOException {
    java.nio.ByteBuffer buf =
        java.nio.ByteBuffer.wrap(java.nio.file.Files.readAllBytes(java.nio.file.Path.of(path)))
            .order(java.nio.ByteOrder.LITTLE_ENDIAN);
    int n = buf.remaining() / (4 * dims);
    float[][] out = new float[n][dims];
    for (float[] v : out) {
      buf.asFloatBuffer().get(v);
      buf.position(buf.position() + 4 * dims);
      prepare(v, similarity);
    }
    return out;
  }

  static float[] prepare(float[] v, String similarity) {
    if (similarity.equals("cosine") && Math.abs(VectorUtil.dotProduct(v, v) - 1.0f) > 1e-3f) {
      VectorUtil.l2normalize(v);
    }
    return v;
  }

  /**
   * {"similarity", "vectors", "queries", "k"} -> per query {"ids", "scores"}: the exact top k (score descending, then
   * doc id), scored by VectorSimilarityFunction.compare, and "all": every vector's score.
   */
  static JsonNode knnExact(JsonNode req) {
    String similarity = req.path("similarity").asText();
    VectorSimilarityFunction fn = function(similarity);
    float[][] docs = vectors(req.path("vectors"), similarity);
    float[][] queries = vectors(req.path("queries"), similarity);
    int k = req.path("k").asInt(10);
    ObjectNode answer = JSON.createObjectNode();
    ArrayNode results = answer.putArray("results");
    for (float[] q : queries) {
      float[] scores = new float[docs.length];
      for (int i = 0; i < docs.length; i++) {
        scores[i] = fn.compare(q, docs[i]);
      }
      ObjectNode r = results.addObject();
      ArrayNode all = r.putArray("all");
      for (float s : scores) {
        all.add((double) s);
      }
      ArrayNode ids = r.putArray("ids");
      ArrayNode top = r.putArray("scores");
      for (int i : exactTop(scores, k)) {
        ids.add(i);
        top.add((double) scores[i]);
      }
    }
    return answer;
  }

  static int[] exactTop(float[] scores, int k) {
    Integer[] order = new Integer[scores.length];
    for (int i = 0; i < order.length; i++) {
      order[i] = i;
    }
    java.util.Arrays.sort(order, (x, y) -> scores[x] != scores[y] ? Float.compare(scores[y], scores[x]) : x - y);
    int n = Math.min(k, order.length);
    int[] out = new int[n];
    for (int i = 0; i < n; i++) {
      out[i] = order[i];
    }
    return out;
  }

  /**
   * {"similarity", "n", "dims", "n_queries", "seed", "k", "num_candidates", "m", "ef_construction"} (or "vectors" and
   * "queries" given) -> {"recall", "per_query"}: what Elasticsearch's float HNSW (Lucene99HnswVectorsFormat, m 16 and
   * ef_construction 100 by default) finds of the exact top k. Like ESKnnFloatVectorQuery, the graph is searched with
   * num_candidates as the queue size and the best k of those are kept. Random vectors are Gaussian (seeded).
   */
  static JsonNode hnswRecall(JsonNode req) throws IOException {
    String similarity = req.path("similarity").asText("cosine");
    int[] ks;
    if (req.has("ks")) {
      ks = new int[req.path("ks").size()];
      for (int i = 0; i < ks.length; i++) {
        ks[i] = req.path("ks").get(i).asInt();
      }
    } else {
      ks = new int[] {req.path("k").asInt(10)};
    }
    int numCandidates = req.path("num_candidates").asInt(100);
    int m = req.path("m").asInt(Lucene99HnswVectorsFormat.DEFAULT_MAX_CONN);
    int efConstruction = req.path("ef_construction").asInt(Lucene99HnswVectorsFormat.DEFAULT_BEAM_WIDTH);
    float[][] docs;
    float[][] queries;
    if (req.has("vectors_file")) {
      int dims = req.path("dims").asInt(384);
      docs = vectorsFile(req.path("vectors_file").asText(), dims, similarity);
      queries = vectorsFile(req.path("queries_file").asText(), dims, similarity);
    } else if (req.has("vectors")) {
      docs = vectors(req.path("vectors"), similarity);
      queries = vectors(req.path("queries"), similarity);
    } else {
      Random rnd = new Random(req.path("seed").asLong(42));
      int dims = req.path("dims").asInt(384);
      docs = gaussian(rnd, req.path("n").asInt(10000), dims, similarity);
      queries = gaussian(rnd, req.path("n_queries").asInt(100), dims, similarity);
    }
    KnnVectorsFormat hnsw = new Lucene99HnswVectorsFormat(m, efConstruction);
    Codec codec =
        new FilterCodec(Codec.getDefault().getName(), Codec.getDefault()) {
          @Override
          public KnnVectorsFormat knnVectorsFormat() {
            return new PerFieldKnnVectorsFormat() {
              @Override
              public KnnVectorsFormat getKnnVectorsFormatForField(String field) {
                return hnsw;
              }
            };
          }
        };
    VectorSimilarityFunction fn = function(similarity);
    ByteBuffersDirectory dir = new ByteBuffersDirectory();
    try (IndexWriter w = new IndexWriter(dir, new IndexWriterConfig().setCodec(codec).setRAMBufferSizeMB(1024))) {
      for (int i = 0; i < docs.length; i++) {
        Document doc = new Document();
        doc.add(new KnnFloatVectorField("v", docs[i], fn));
        doc.add(new NumericDocValuesField("_id", i));
        w.addDocument(doc);
      }
      w.forceMerge(1);
    }
    ObjectNode answer = JSON.createObjectNode();
    ArrayNode perQuery = answer.putArray("per_query");
    ObjectNode recallAt = answer.putObject("recall_at");
    double[] sums = new double[ks.length];
    try (DirectoryReader reader = DirectoryReader.open(dir)) {
      IndexSearcher searcher = new IndexSearcher(reader);
      int[] ids = docIds(reader);
      for (float[] q : queries) {
        float[] scores = new float[docs.length];
        for (int i = 0; i < docs.length; i++) {
          scores[i] = fn.compare(q, docs[i]);
        }
        for (int j = 0; j < ks.length; j++) {
          int k = ks[j];
          java.util.Set<Integer> exact = new java.util.HashSet<>();
          for (int i : exactTop(scores, k)) {
            exact.add(i);
          }
          TopDocs approx = searcher.search(new KnnFloatVectorQuery("v", q, Math.max(numCandidates, k)), k);
          int found = 0;
          for (ScoreDoc sd : approx.scoreDocs) {
            found += exact.contains(ids[sd.doc]) ? 1 : 0;
          }
          double recall = (double) found / exact.size();
          if (j == 0) {
            perQuery.add(recall);
          }
          sums[j] += recall;
        }
      }
    }
    for (int j = 0; j < ks.length; j++) {
      recallAt.put(Integer.toString(ks[j]), sums[j] / queries.length);
    }
    answer.put("recall", sums[0] / queries.length);
    return answer;
  }

  static float[][] gaussian(Random rnd, int n, int dims, String similarity) {
    float[][] out = new float[n][dims];
    for (float[] v : out) {
      for (int j = 0; j < dims; j++) {
        v[j] = (float) rnd.nextGaussian();
      }
      if (similarity.equals("dot_product")) {
        VectorUtil.l2normalize(v);
      }
      prepare(v, similarity);
    }
    return out;
  }

  /**
   * {"ints": [..]} -> {"bytes": [..], "decoded": [..]}: SmallFloat.intToByte4 (as an unsigned byte) and
   * SmallFloat.byte4ToInt of that byte, the one-byte document length BM25Similarity stores as the norm and reads back
   * through its LENGTH_TABLE.
   */
  static JsonNode smallFloat(JsonNode req) {
    ObjectNode answer = JSON.createObjectNode();
    ArrayNode bytes = answer.putArray("bytes");
    ArrayNode decoded = answer.putArray("decoded");
    for (JsonNode i : req.path("ints")) {
      byte b = SmallFloat.intToByte4(i.asInt());
      bytes.add(Byte.toUnsignedInt(b));
      decoded.add(SmallFloat.byte4ToInt(b));
    }
    return answer;
  }
}
