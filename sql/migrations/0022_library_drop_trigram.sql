-- Duplicate detection compares entries that share rare words in the service (service/domain/
-- library.py), not with pg_trgm's `%` operator: on a 10,000-entry library with common words the
-- GiST probes took minutes. The two trigram indexes 0022_library made are unused; each write paid
-- for them.
DROP INDEX IF EXISTS knowledge_items_question_trgm;
DROP INDEX IF EXISTS knowledge_items_answer_trgm;
